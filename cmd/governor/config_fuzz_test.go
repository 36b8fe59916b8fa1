package main

import (
	"reflect"
	"strings"
	"testing"
)

// variables are the names of every GOVERNOR_* variable.
func variables() []string {
	var names []string
	t := reflect.TypeFor[config]()
	for i := range t.NumField() {
		if name := t.Field(i).Tag.Get("env"); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// FuzzLoadConfig sets one variable to any value: the configuration loads,
// or the error names a variable (Governor then exits 2 with it). It never
// panics.
func FuzzLoadConfig(f *testing.F) {
	names := variables()
	for i, v := range []string{"", "0", "-1", "1e400", "10m", "-5s", "http://x", "ftp://u:p@x", "a=http://x,a=http://y",
		"debug", "xml", "99999999999999999999", "NaN", "phoenix", "0.0.0.0:0", "::1", "1h1h", "true"} {
		f.Add(uint8(i), v)
	}
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		name := names[int(which)%len(names)]
		if strings.ContainsRune(value, 0) {
			return // an environment cannot hold NUL
		}
		cfg, err := loadConfig([]string{name + "=" + value})
		if err != nil {
			if !strings.Contains(err.Error(), "GOVERNOR_") {
				t.Fatalf("%s=%q: error names no variable: %v", name, value, err)
			}
			return
		}
		if cfg.upstream.URL == nil {
			t.Fatalf("%s=%q: loaded without an upstream", name, value)
		}
	})
}
