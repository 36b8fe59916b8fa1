package main

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A variable set to the empty string, as a manifest whose template left
// its value out sets it, is refused like any value Governor cannot use
// (exit 2, nothing runs): it does not start Governor on the default
// address in silence.
func TestEmptyListenerIsRefused(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"GOVERNOR_LISTEN=", `GOVERNOR_LISTEN="": want an address such as 127.0.0.1:8080 or :8080; unset it for the default (127.0.0.1:8080)`},
		{"GOVERNOR_ADMIN_LISTEN=", `GOVERNOR_ADMIN_LISTEN="": want an address such as :9090 or 127.0.0.1:9090; unset it for the default (:9090)`},
		{"GOVERNOR_DRAIN_TIMEOUT=", `GOVERNOR_DRAIN_TIMEOUT="": want a duration such as 30s or 2m; unset it for the default (30s)`},
		{"GOVERNOR_ACCESS_LOG=", `GOVERNOR_ACCESS_LOG="": want true or false; unset it for the default (false)`},
	} {
		_, err := loadConfig([]string{tc.env})
		require.Error(t, err, tc.env)
		var out, errOut bytes.Buffer
		code := run(nil, []string{"GOVERNOR_LISTEN=127.0.0.1:0", "GOVERNOR_ADMIN_LISTEN=127.0.0.1:0", tc.env}, &out, &errOut)
		assert.Equal(t, exitUsage, code, tc.env)
		assert.Empty(t, out.String(), tc.env)
		assert.Equal(t, "governor: invalid configuration: "+tc.want+"\n", errOut.String(), tc.env)
	}
}

// Every variable with a default refuses empty; every variable whose
// default is empty (its empty value documented: no routes, no token,
// memory only, no Redis, a generated name) takes it.
func TestEmptyIsRefusedUnlessItHasAMeaning(t *testing.T) {
	typ := reflect.TypeFor[config]()
	var meaningful []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := f.Tag.Get("env")
		_, err := loadConfig([]string{name + "="})
		if f.Tag.Get("envDefault") == "" {
			meaningful = append(meaningful, name)
			assert.NoError(t, err, name)
			continue
		}
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), name+`="": want `, name)
			assert.Contains(t, err.Error(), "; unset it for the default ("+f.Tag.Get("envDefault")+")", name)
		}
	}
	require.ElementsMatch(t, []string{"GOVERNOR_ROUTES", "GOVERNOR_BATCH_DIR", "GOVERNOR_REDIS_URL", "GOVERNOR_INSTANCE", "GOVERNOR_API_TOKEN"}, meaningful)
}
