package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/internal/redistest"
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
