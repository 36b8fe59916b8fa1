package coord

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/internal/redistest"
)

// startAt runs New against url and returns what it logged and its error.
func startAt(t *testing.T, url string) (*Coordinator, string, error) {
	t.Helper()
	return startAtTimeout(t, url, 200*time.Millisecond)
}

// startAtTimeout is startAt with a Config.Timeout (0: the default).
func startAtTimeout(t *testing.T, url string, timeout time.Duration) (*Coordinator, string, error) {
	t.Helper()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	buf := &syncBuffer{}
	co, err := New(Config{Options: opts, Instance: "a", Metrics: metrics.NewSet(),
		Logger: slog.New(slog.NewTextHandler(buf, nil)), Timeout: timeout})
	if co != nil {
		t.Cleanup(func() { co.Close() })
	}
	return co, buf.String(), err
}

// A Redis that answers and refuses what the URL says (its credentials,
// its database number) fails the start with an error that says so, not
// "unreachable": no wait fixes a wrong password.
func TestRedisThatRefusesTheURLFailsTheStart(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.Do(context.Background(), "config", "set", "requirepass", "s3cret").Err())
	for _, tc := range []struct {
		name, url string
		cause     Cause
		says      string
	}{
		{"a wrong password", "redis://:wrong-pw@" + srv.Addr(), CauseAuth, "WRONGPASS"},
		{"an unknown user", "redis://nobody:s3cret@" + srv.Addr(), CauseAuth, "WRONGPASS"},
		{"no password", "redis://" + srv.Addr(), CauseAuth, "NOAUTH"},
		{"a database out of range", "redis://:s3cret@" + srv.Addr() + "/99", CauseDatabase, "DB index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			co, logged, err := startAt(t, tc.url)
			require.Error(t, err, tc.url)
			assert.Nil(t, co)
			var se *StartError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.cause, se.Cause)
			assert.Equal(t, tc.cause, Classify(err))
			assert.Contains(t, err.Error(), tc.says)
			assert.Contains(t, err.Error(), describe(tc.cause))
			assert.Contains(t, err.Error(), srv.Addr())
			assert.NotContains(t, err.Error(), "wrong-pw", "no password in the error")
			assert.NotContains(t, err.Error(), "unreachable")
			assert.Empty(t, logged, "the caller reports the error")
		})
	}
	co, _, err := startAt(t, "redis://:s3cret@"+srv.Addr())
	require.NoError(t, err)
	assert.True(t, co.Up(), "the right password joins")
	assert.Empty(t, co.Cause())
}

// A Redis whose password changes under a running Governor: the loss and
// the rejoin attempts say the credentials were refused, as does Cause,
// and the Governor rejoins once they are accepted again.
func TestCredentialsRefusedWhileRunning(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.Do(ctx, "config", "set", "requirepass", "s3cret").Err())
	require.NoError(t, admin.Do(ctx, "auth", "s3cret").Err())
	a := newCoordURL(t, "redis://:s3cret@"+srv.Addr(), "a", nil, 20*time.Millisecond)
	require.True(t, a.Up())
	sync1(t, a, Report{Initial: 8})

	// The password changes; the Governor's connections are closed (a
	// Redis restart, a failover).
	require.NoError(t, admin.Do(ctx, "config", "set", "requirepass", "rotated").Err())
	require.NoError(t, admin.Do(ctx, "client", "kill", "type", "normal").Err())
	_, err := a.Sync(ctx, []Report{{Lane: "l", Max: 8}})
	require.ErrorIs(t, err, ErrLocal)
	require.Eventually(t, func() bool { return a.Cause() == CauseAuth }, 5*time.Second, 10*time.Millisecond,
		"the rejoin attempts meet WRONGPASS: %s", a.log.String())
	require.Eventually(t, func() bool { return strings.Contains(a.log.String(), "cause=auth") }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, a.log.String(), "WRONGPASS")
	assert.False(t, a.Up())

	require.NoError(t, admin.Do(ctx, "config", "set", "requirepass", "s3cret").Err())
	require.Eventually(t, a.Up, 5*time.Second, 10*time.Millisecond, "rejoins once the credentials are accepted")
	assert.Empty(t, a.Cause())
}

// A Redis lost, then back with a password the Governor does not have: the
// rejoin attempts' new cause is logged, once, and Cause says it.
func TestNewCauseWhileLostIsLogged(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	a := newCoord(t, srv, "a", nil)
	sync1(t, a, Report{Initial: 8})
	srv.Kill()
	_, err := a.Sync(context.Background(), []Report{{Lane: "l", Max: 8}})
	require.ErrorIs(t, err, ErrLocal)
	assert.NotEqual(t, CauseAuth, a.Cause())

	srv.RestartWith("--requirepass", "s3cret")
	require.Eventually(t, func() bool { return strings.Contains(a.log.String(), "redis coordination still lost") },
		5*time.Second, 10*time.Millisecond, "the new cause is logged: %s", a.log.String())
	logged := a.log.String()
	assert.Equal(t, 1, strings.Count(logged, "redis coordination still lost"))
	assert.Contains(t, logged, "cause=auth")
	assert.Contains(t, logged, "NOAUTH")
	assert.Equal(t, CauseAuth, a.Cause())
	assert.False(t, a.Up())
}

// A Redis that is down at start: the Governor starts locally, and the log
// and Cause say the connection was refused, with the default timeout
// (shorter than go-redis's wait after a failed dial).
func TestRedisDownAtStartSaysRefused(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	srv.Kill()
	co, logged, err := startAtTimeout(t, srv.URL(), 0)
	require.NoError(t, err, "Redis down is no start-up error: Governor governs locally")
	assert.False(t, co.Up())
	assert.Equal(t, CauseRefused, co.Cause())
	assert.Contains(t, logged, "redis unreachable at start")
	assert.Contains(t, logged, "cause=refused")
}

// A user that may not run Governor's commands is an answer, not an
// outage: the log says Redis refuses, with cause=noperm, and the
// Governor starts locally (an ACL is fixed on Redis's side).
func TestUserWithoutPermissionsIsLoggedAsSuch(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.Do(context.Background(), "acl", "setuser", "limited", "on", ">pw", "~other:*", "+ping").Err())
	co, logged, err := startAt(t, "redis://limited:pw@"+srv.Addr())
	require.NoError(t, err)
	assert.False(t, co.Up())
	assert.Equal(t, CauseNoPerm, co.Cause())
	assert.Contains(t, logged, "redis refuses coordination at start")
	assert.Contains(t, logged, "cause=noperm")
	assert.NotContains(t, logged, "unreachable")
}

// rediss:// to a server that does not speak TLS.
func TestTLSFailureIsClassified(t *testing.T) {
	leakcheck.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("-ERR plain text\r\n"))
			c.Close()
		}
	}()
	defer func() { ln.Close(); <-done }()
	co, logged, err := startAt(t, "rediss://"+ln.Addr().String())
	require.NoError(t, err)
	assert.Equal(t, CauseTLS, co.Cause(), logged)
	assert.Contains(t, logged, "cause=tls")
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Cause
	}{
		{nil, ""},
		{&net.DNSError{Err: "no such host", Name: "redis.example", IsNotFound: true}, CauseDNS},
		{context.DeadlineExceeded, CauseTimeout},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, CauseTimeout},
		{errors.New("EOF"), CauseOther},
		{redis.ErrClosed, CauseOther},
	} {
		assert.Equal(t, tc.want, Classify(tc.err), "%v", tc.err)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
