package batch

import (
	"encoding/json"
	"slices"
	"testing"
)

// objectKeys finds the keys encoding/json finds, in any valid JSON.
func FuzzObjectKeys(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `[1,{"a":2}]`, `"x"`, ` { "a" : 1 , "b":"x\"}," ,"c":{"d":[1,{"e":"]"}]},"f":true,"g":null,"h":-1.5e3 } `,
		`{"a\u0062":1,"\\":2,"é":"\\"}`, `{"requests":[{"url":"/v1/x","body":{}}],"timeout":"30s"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil {
			return
		}
		want := make([]string, 0, len(m))
		for k := range m {
			want = append(want, k)
		}
		got := objectKeys(data)
		slices.Sort(want)
		slices.Sort(got)
		got = slices.Compact(got)
		if !slices.Equal(got, want) {
			t.Fatalf("objectKeys(%q) = %q, want %q", data, got, want)
		}
	})
}
