package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/internal/redistest"
	"github.com/llmgovernor/governor/mockllm"
)

// A GOVERNOR_REDIS_URL whose credentials Redis refuses stops the start-up
// with one line that names the variable and says the credentials were
// refused, and shows no password: a wrong password is a configuration to
// fix, not an outage to wait out (a Redis that is down is: see
// TestRedisDownAtStart).
func TestRedisRefusingTheCredentialsStopsTheStartup(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.Do(context.Background(), "config", "set", "requirepass", "s3cret").Err())
	for _, tc := range []struct{ name, url, says string }{
		{"wrong password", "redis://:not-the-password@" + srv.Addr(), "WRONGPASS"},
		{"no password", "redis://" + srv.Addr(), "NOAUTH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(nil, []string{
				"GOVERNOR_LISTEN=127.0.0.1:0",
				"GOVERNOR_ADMIN_LISTEN=127.0.0.1:0",
				"GOVERNOR_UPSTREAM=http://127.0.0.1:9",
				"GOVERNOR_LOG_FORMAT=text",
				"GOVERNOR_REDIS_URL=" + tc.url,
			}, &out, &errOut)
			assert.Equal(t, exitFailed, code)
			logged := strings.TrimSpace(errOut.String())
			assert.Equal(t, 1, strings.Count(logged, "\n")+1, "one line: %s", logged)
			assert.Contains(t, logged, "level=ERROR")
			assert.Contains(t, logged, "GOVERNOR_REDIS_URL: redis at "+srv.Addr()+" refused the credentials")
			assert.Contains(t, logged, tc.says)
			assert.NotContains(t, logged, "unreachable")
			assert.NotContains(t, logged, "not-the-password")
			assert.NotContains(t, logged, "governor started")
		})
	}
}

// With GOVERNOR_REDIS_AUTH_FAILURE=local, a Redis that refuses the URL's
// password is governed around as a Redis that is down: Governor serves,
// alone, says why in GET /governor/lanes, and joins once Redis accepts
// the password. A sidecar whose Redis password is wrong then keeps its
// application's calls going.
func TestRedisRefusingTheCredentialsCanStartLocal(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.Do(context.Background(), "config", "set", "requirepass", "s3cret").Err())
	_, mockURL := startMock(t, mockllm.Config{})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_REDIS_URL=redis://:n3w@"+srv.Addr(),
		"GOVERNOR_REDIS_AUTH_FAILURE=local", "GOVERNOR_LOG_LEVEL=info", "GOVERNOR_REDIS_TIMEOUT=100ms")
	require.NoError(t, complete(call(g.base, false, 0), false), "serves, governing alone")
	assert.Equal(t, redisView{Up: false, Cause: "auth"}, g.redis(t), "GET /governor/lanes says why")
	assert.Contains(t, g.logs(), "redis refuses coordination at start")
	assert.NotContains(t, g.logs(), "n3w")

	require.NoError(t, admin.Do(context.Background(), "config", "set", "requirepass", "n3w").Err())
	require.Eventually(t, func() bool { l, _ := g.lane(t); return l.Coordinated }, 5*time.Second, 20*time.Millisecond,
		"joins once Redis accepts the password")
	assert.Equal(t, redisView{Up: true}, g.redis(t))
}
