package main

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A value Governor cannot use is refused at start-up (exit 2, nothing
// runs) with one line that names the variable, quotes the value given and
// says what is wanted, in a user's words, never a Go parser's.
func TestBadValueSaysWhatIsWanted(t *testing.T) {
	const prefix = "governor: invalid configuration: "
	for _, tc := range []struct{ env, want string }{
		// whole numbers
		{"GOVERNOR_MAX_RETRIES=x", `GOVERNOR_MAX_RETRIES="x": want a whole number`},
		{"GOVERNOR_MAX_RETRIES=2.5", `GOVERNOR_MAX_RETRIES="2.5": want a whole number`},
		{"GOVERNOR_MAX_RETRIES=99999999999999999999", `GOVERNOR_MAX_RETRIES="99999999999999999999": want a whole number no larger than 9223372036854775807`},
		{"GOVERNOR_MAX_RETRIES=-1", `GOVERNOR_MAX_RETRIES="-1": want a whole number from 0 to 100`},
		{"GOVERNOR_MAX_CONCURRENCY=0", `GOVERNOR_MAX_CONCURRENCY="0": want a whole number, 1 or more`},
		{"GOVERNOR_BATCH_WINDOW=-1", `GOVERNOR_BATCH_WINDOW="-1": want 0 (twice GOVERNOR_MAX_CONCURRENCY) or a whole number above it`},
		{"GOVERNOR_AIMD_PROBE_HOLD=four", `GOVERNOR_AIMD_PROBE_HOLD="four": want a whole number`},
		// byte sizes
		{"GOVERNOR_MAX_BODY_BYTES=32MiB", `GOVERNOR_MAX_BODY_BYTES="32MiB": want a number of bytes, 1 or more, without a unit (33554432 for 32 MiB)`},
		{"GOVERNOR_MAX_BUFFERED_BYTES=0", `GOVERNOR_MAX_BUFFERED_BYTES="0": want a number of bytes, 1 or more, without a unit (33554432 for 32 MiB)`},
		// numbers
		{"GOVERNOR_AIMD_LATENCY_ALPHA=x", `GOVERNOR_AIMD_LATENCY_ALPHA="x": want a number such as 0.5`},
		{"GOVERNOR_AIMD_LATENCY_ALPHA=NaN", `GOVERNOR_AIMD_LATENCY_ALPHA="NaN": want a number from 0 to 1, such as 0.2`},
		{"GOVERNOR_AIMD_DECREASE_RATIO=1", `GOVERNOR_AIMD_DECREASE_RATIO="1": want 0 (the preset's) or a number above 0 and below 1, such as 0.9`},
		{"GOVERNOR_AIMD_INITIAL=100", `GOVERNOR_AIMD_INITIAL="100": want 0 (the preset's) or a number up to GOVERNOR_MAX_CONCURRENCY (64)`},
		{"GOVERNOR_AIMD_LATENCY_TOLERANCE=0.5", `GOVERNOR_AIMD_LATENCY_TOLERANCE="0.5": want a number above 1 such as 1.25, 0 (1.25) or a negative number (ignore latency)`},
		// durations
		{"GOVERNOR_QUEUE_TIMEOUT=5", `GOVERNOR_QUEUE_TIMEOUT="5": want a duration such as 30s or 2m`},
		{"GOVERNOR_ATTEMPT_TIMEOUT=soon", `GOVERNOR_ATTEMPT_TIMEOUT="soon": want a duration such as 30s or 2m`},
		{"GOVERNOR_STREAM_IDLE_TIMEOUT=-1s", `GOVERNOR_STREAM_IDLE_TIMEOUT="-1s": want a duration above zero, such as 30s or 2m`},
		{"GOVERNOR_AIMD_ADMISSION_WINDOW=2m", `GOVERNOR_AIMD_ADMISSION_WINDOW="2m": want a duration of at most 1m, such as 4ms`},
		{"GOVERNOR_BACKOFF_BASE=1m", `GOVERNOR_BACKOFF_MAX="30s" (its default): want a duration at least GOVERNOR_BACKOFF_BASE (1m0s)`},
		{"GOVERNOR_REDIS_LEASE_TTL=80ms", `GOVERNOR_REDIS_LEASE_TTL="80ms": want a duration at least twice GOVERNOR_REDIS_SYNC_INTERVAL (100ms)`},
		// booleans
		{"GOVERNOR_ACCESS_LOG=yes", `GOVERNOR_ACCESS_LOG="yes": want true or false`},
		// choices and names
		{"GOVERNOR_LOG_LEVEL=loud", `GOVERNOR_LOG_LEVEL="loud": want debug, info, warn or error`},
		{"GOVERNOR_REDIS_AUTH_FAILURE=ignore", `GOVERNOR_REDIS_AUTH_FAILURE="ignore": want stop or local`},
		{"GOVERNOR_LOG_FORMAT=xml", `GOVERNOR_LOG_FORMAT="xml": want auto, json or text`},
		{"GOVERNOR_AIMD_PRESET=fast", `GOVERNOR_AIMD_PRESET="fast": want default or phoenix`},
		{"GOVERNOR_INSTANCE=two words", `GOVERNOR_INSTANCE="two words": want at most 128 letters, digits, '.', '_', ':' or '-'`},
		// listen addresses: malformed is a bad value, not a failure to listen
		{"GOVERNOR_LISTEN=8080", `GOVERNOR_LISTEN="8080": want host:port or :port, such as 127.0.0.1:8080, with a port from 0 to 65535`},
		{"GOVERNOR_LISTEN=127.0.0.1:99999", `GOVERNOR_LISTEN="127.0.0.1:99999": want host:port`},
		{"GOVERNOR_ADMIN_LISTEN=:-1", `GOVERNOR_ADMIN_LISTEN=":-1": want host:port`},
		// URLs and lists (their own parsers say what is wrong; no value is
		// quoted, as a URL may hold a password)
		{"GOVERNOR_UPSTREAM=ftp://example.com", `GOVERNOR_UPSTREAM: `},
		{"GOVERNOR_ROUTES=anthropic", `GOVERNOR_ROUTES: `},
		{"GOVERNOR_REDIS_URL=http://localhost:6379", `GOVERNOR_REDIS_URL: want redis://`},
	} {
		var out, errOut bytes.Buffer
		code := run(nil, []string{tc.env}, &out, &errOut)
		assert.Equal(t, exitUsage, code, tc.env)
		assert.Empty(t, out.String(), tc.env)
		assert.Contains(t, errOut.String(), prefix+tc.want, tc.env)
		assert.NotContains(t, errOut.String(), "strconv", tc.env)
		assert.NotContains(t, errOut.String(), "time: ", tc.env)
	}
}

// Every variable of a parsed kind, given a value of no kind, is refused
// with its name, its value and a want: none falls through to a Go parser's
// words.
func TestEveryParsedVariableSaysWhatIsWanted(t *testing.T) {
	typ := reflect.TypeFor[config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Type.Kind() == reflect.String {
			continue // read as given; checked by their own parsers above
		}
		name := f.Tag.Get("env")
		_, err := loadConfig([]string{name + "=%bad"})
		if !assert.Error(t, err, name) {
			continue
		}
		msg := err.Error()
		assert.Contains(t, msg, name+`="%bad": want `, name)
		switch {
		case f.Type == reflect.TypeFor[time.Duration]():
			assert.Contains(t, msg, wantDuration, name)
		case f.Type.Kind() == reflect.Bool:
			assert.Contains(t, msg, wantBool, name)
		case f.Type.Kind() == reflect.Float64:
			assert.Contains(t, msg, wantNumber, name)
		default:
			assert.Contains(t, msg, "want a", name)
		}
	}
}
