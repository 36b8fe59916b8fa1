package main

import (
	"os"
	"reflect"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// README's configuration names every variable `governor -h` lists, and
// names no variable Governor does not read (the Python example's own
// GOVERNOR_URL and the GOVERNOR_AIMD_* heading aside).
func TestREADMENamesEveryVariable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	known := map[string]bool{}
	typ := reflect.TypeFor[config]()
	for i := range typ.NumField() {
		name := typ.Field(i).Tag.Get("env")
		known[name] = true
		assert.Contains(t, string(readme), "`"+name+"`", "README names %s", name)
	}
	for _, name := range regexp.MustCompile(`GOVERNOR_[A-Z_]*[A-Z]`).FindAllString(string(readme), -1) {
		if name == "GOVERNOR_URL" || name == "GOVERNOR_AIMD" {
			continue
		}
		assert.True(t, known[name], "README names %s, which Governor does not read", name)
	}
}
