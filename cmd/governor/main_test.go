package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
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

func TestHelpListsEveryVariable(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, exitOK, run([]string{"-h"}, nil, &out, &errOut))
	for _, v := range []string{"GOVERNOR_LISTEN", "GOVERNOR_ADMIN_LISTEN", "GOVERNOR_UPSTREAM", "GOVERNOR_ROUTES",
		"GOVERNOR_MAX_BODY_BYTES", "GOVERNOR_STREAM_IDLE_TIMEOUT", "GOVERNOR_ATTEMPT_TIMEOUT", "GOVERNOR_DRAIN_TIMEOUT",
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
