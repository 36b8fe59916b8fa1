package main

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBadConfigExits2NamingTheVariable(t *testing.T) {
	for _, tc := range []struct{ env, variable string }{
		{"GOVERNOR_ATTEMPT_TIMEOUT=soon", "GOVERNOR_ATTEMPT_TIMEOUT"},
		{"GOVERNOR_STREAM_IDLE_TIMEOUT=-1s", "GOVERNOR_STREAM_IDLE_TIMEOUT"},
		{"GOVERNOR_UPSTREAM=ftp://example.com", "GOVERNOR_UPSTREAM"},
		{"GOVERNOR_UPSTREAM=not a url", "GOVERNOR_UPSTREAM"},
		{"GOVERNOR_ROUTES=anthropic", "GOVERNOR_ROUTES"},
		{"GOVERNOR_ROUTES=Bad Name=http://x", "GOVERNOR_ROUTES"},
		{"GOVERNOR_ROUTES=a=http://x,a=http://y", "GOVERNOR_ROUTES"},
		{"GOVERNOR_ROUTES=governor=http://x", "GOVERNOR_ROUTES"},
		{"GOVERNOR_MAX_BODY_BYTES=lots", "GOVERNOR_MAX_BODY_BYTES"},
		{"GOVERNOR_MAX_BODY_BYTES=0", "GOVERNOR_MAX_BODY_BYTES"},
		{"GOVERNOR_LOG_LEVEL=loud", "GOVERNOR_LOG_LEVEL"},
		{"GOVERNOR_LOG_FORMAT=xml", "GOVERNOR_LOG_FORMAT"},
		{"GOVERNOR_REDIS_URL=http://localhost:6379", "GOVERNOR_REDIS_URL"},
		{"GOVERNOR_REDIS_URL=redis://localhost:port", "GOVERNOR_REDIS_URL"},
		{"GOVERNOR_REDIS_TIMEOUT=0s", "GOVERNOR_REDIS_TIMEOUT"},
		{"GOVERNOR_REDIS_TIMEOUT=fast", "GOVERNOR_REDIS_TIMEOUT"},
		{"GOVERNOR_REDIS_SYNC_INTERVAL=-1s", "GOVERNOR_REDIS_SYNC_INTERVAL"},
		{"GOVERNOR_REDIS_LEASE_TTL=80ms", "GOVERNOR_REDIS_LEASE_TTL"}, // under twice the 50ms sync interval
		{"GOVERNOR_INSTANCE=two words", "GOVERNOR_INSTANCE"},
		{"GOVERNOR_MAX_CONNS_PER_UPSTREAM=0", "GOVERNOR_MAX_CONNS_PER_UPSTREAM"},
		{"GOVERNOR_MAX_CONNECTIONS=-1", "GOVERNOR_MAX_CONNECTIONS"},
		{"GOVERNOR_MAX_BUFFERED_BYTES=0", "GOVERNOR_MAX_BUFFERED_BYTES"},
		{"GOVERNOR_MAX_BUFFERED_BYTES=lots", "GOVERNOR_MAX_BUFFERED_BYTES"},
		{"GOVERNOR_BATCH_MAX_RESPONSE_BYTES=0", "GOVERNOR_BATCH_MAX_RESPONSE_BYTES"},
		{"GOVERNOR_AIMD_LATENCY_TOLERANCE=0.5", "GOVERNOR_AIMD_"},
	} {
		var out, errOut bytes.Buffer
		code := run(nil, []string{tc.env}, &out, &errOut)
		assert.Equal(t, exitUsage, code, tc.env)
		assert.Contains(t, errOut.String(), tc.variable, tc.env)
	}
}

func TestUpstreamCredentialsAreNotEchoed(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(nil, []string{"GOVERNOR_UPSTREAM=https://user:sk-canary@example.com"}, &out, &errOut)
	assert.Equal(t, exitUsage, code)
	assert.NotContains(t, errOut.String(), "sk-canary")
}

func TestRedisPasswordIsNotEchoed(t *testing.T) {
	for _, u := range []string{"redis://user:sk-canary@host:port", "redis://user:sk-canary@%zz", "ftp://user:sk-canary@host"} {
		var out, errOut bytes.Buffer
		code := run(nil, []string{"GOVERNOR_REDIS_URL=" + u}, &out, &errOut)
		assert.Equal(t, exitUsage, code, u)
		assert.Contains(t, errOut.String(), "GOVERNOR_REDIS_URL", u)
		assert.NotContains(t, errOut.String(), "sk-canary", u)
	}
}

func TestHelpListsEveryVariable(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, exitOK, run([]string{"-h"}, nil, &out, &errOut))
	for _, v := range []string{"GOVERNOR_LISTEN", "GOVERNOR_ADMIN_LISTEN", "GOVERNOR_UPSTREAM", "GOVERNOR_ROUTES",
		"GOVERNOR_MAX_BODY_BYTES", "GOVERNOR_STREAM_IDLE_TIMEOUT", "GOVERNOR_ATTEMPT_TIMEOUT", "GOVERNOR_DRAIN_TIMEOUT",
		"GOVERNOR_REDIS_URL", "GOVERNOR_REDIS_AUTH_FAILURE", "GOVERNOR_REDIS_TIMEOUT", "GOVERNOR_REDIS_SYNC_INTERVAL", "GOVERNOR_REDIS_LEASE_TTL", "GOVERNOR_INSTANCE",
		"127.0.0.1:8080", ":9090", "https://api.openai.com"} {
		assert.Contains(t, out.String(), v)
	}
}

func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, exitOK, run([]string{"-version"}, nil, &out, &errOut))
	assert.Regexp(t, `^governor \S+ \(go1\.\d+`, out.String())
}

func TestUnknownFlagExits2(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, exitUsage, run([]string{"-nope"}, nil, &out, &errOut))
	assert.Contains(t, errOut.String(), "-nope")
}

func TestMaxConcurrencyAboveConnsIsReported(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		warn bool
	}{
		{nil, false}, // 64 and 1024
		{[]string{"GOVERNOR_MAX_CONCURRENCY=4000"}, true},
		{[]string{"GOVERNOR_MAX_CONCURRENCY=4000", "GOVERNOR_MAX_CONNS_PER_UPSTREAM=4000"}, false},
		{[]string{"GOVERNOR_MAX_CONNS_PER_UPSTREAM=16"}, true},
	} {
		cfg, err := loadConfig(tc.env)
		require.NoError(t, err, tc.env)
		var b bytes.Buffer
		warnConnBound(slog.New(slog.NewTextHandler(&b, nil)), cfg)
		if tc.warn {
			assert.Contains(t, b.String(), "GOVERNOR_MAX_CONNS_PER_UPSTREAM", tc.env)
		} else {
			assert.Empty(t, b.String(), tc.env)
		}
	}
}
