package main

import (
	"reflect"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the errors and logs of proxy and batch call a setting is the
// variable a user sets, for every setting they name: none is left to its
// package's default, the name of a Config field.
func TestMessagesNameVariables(t *testing.T) {
	cfg, err := loadConfig(nil)
	require.NoError(t, err)
	set := metrics.NewSet()
	for _, names := range []any{proxyConfig(cfg, 1, nil, set, nil).Names, batchConfig(cfg, set, nil).Names} {
		v := reflect.ValueOf(names)
		for i := range v.NumField() {
			assert.Regexp(t, `^GOVERNOR_[A-Z_]+$`, v.Field(i).String(), "%T.%s", names, v.Type().Field(i).Name)
		}
	}
}
