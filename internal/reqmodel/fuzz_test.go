package reqmodel

import (
	"encoding/json"
	"strings"
	"testing"
)

// Seed corpora live in testdata/fuzz; `go test` runs them as ordinary
// tests.

func FuzzOf(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[]}`, `  {"messages":[],"model":"claude"}`, `{"model":5}`, `not json`, ``,
		`{"model":"a\"b\\u0000c/../d e"}`, `{"model":"` + strings.Repeat("x", 200) + `"}`, `[{"model":"x"}]`,
		`{"model":"m","model":"n"}`, `{"Model":"M"}`, `{"model":"a","MODEL":null}`, `{"mod\u0065l":"x"}`,
		`{"messages":[{"model":"inner"}],"model":"outer"}`, `{"m":"}","model" : "spaced"}`, `{"model":"caf\u00e9"}`,
		`{"model":"é"}`, `{"model":"a"} x`, `{"ſ":1,"model":"k"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m := Of(body)
		var v struct {
			Model string `json:"model"`
		}
		want := ""
		if trimmed := strings.TrimLeft(string(body), " \t\r\n"); strings.HasPrefix(trimmed, "{") && json.Unmarshal(body, &v) == nil {
			want = v.Model
		}
		if m != want {
			t.Fatalf("%q: model %q, encoding/json says %q", body, m, want)
		}
	})
}

// FuzzScan checks Of's syntax check against json.Valid.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, ` {"a":[1,-2.5e+3,true,false,null,{"b":"c\u00e9\n"}]} `, `{"a":1,}`, `[1,]`, `{"a" 1}`, `01`, `-`, `1.`,
		`1e`, `"\x"`, "\"a\tb\"", "\"a\x01\"", `"\ud800"`, `tru`, `nul`, `{"a":1}x`, `[[[[]]]]`, `[[]`, `"é"`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("0123456789 \\\" ", 9) + `"}]}`,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001), strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s jsonScan
		valid := s.scan(b)
		if s.notString {
			return // it stopped at a "model" that is not a string
		}
		if want := json.Valid(b); valid != want {
			t.Fatalf("%q: valid %v, json.Valid says %v", b, valid, want)
		}
	})
}
