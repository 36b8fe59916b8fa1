package batch

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// fuzzParser accepts paths the way the proxy does in spirit: relative,
// not scheme-relative.
func fuzzParser() *parser {
	return &parser{maxItems: 50, checkPath: func(p string) error {
		if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
			return errBadPathForFuzz
		}
		return nil
	}}
}

var errBadPathForFuzz = errors.New("not a relative path")

// checkAccepted asserts what every accepted batch guarantees.
func checkAccepted(t *testing.T, b *Batch, maxItems int) {
	t.Helper()
	if len(b.Items) == 0 || len(b.Items) > maxItems {
		t.Fatalf("accepted %d items", len(b.Items))
	}
	ids := map[string]bool{}
	for i, it := range b.Items {
		if it.Method != "POST" {
			t.Fatalf("item %d: method %q", i, it.Method)
		}
		if !strings.HasPrefix(it.URL, "/") || strings.HasPrefix(it.URL, "//") {
			t.Fatalf("item %d: url %q", i, it.URL)
		}
		if !isObject(it.Body) {
			t.Fatalf("item %d: body %q", i, it.Body)
		}
		for k, v := range it.Header {
			if !validHeaderName(k) || strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("item %d: header %q: %q", i, k, v)
			}
		}
		if it.CustomID != "" {
			if ids[it.CustomID] {
				t.Fatalf("duplicate custom_id %q accepted", it.CustomID)
			}
			ids[it.CustomID] = true
		}
	}
	o := b.Options
	if o.Urgency < 0 || o.Urgency > 7 || o.Concurrency < 0 || o.Timeout < 0 || o.MaxRetries > 100 {
		t.Fatalf("options out of range: %+v", o)
	}
}

func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(`{"requests":[{"url":"/v1/chat/completions","body":{"model":"m"}}]}`))
	f.Add([]byte(`{"requests":[{"custom_id":"a","method":"post","url":"/v1/x","headers":{"X-A":"1"},"body":{}}],"max_retries":2,"exit_on_error":true,"fallback":{"x":1},"priority":0,"concurrency":4,"timeout":"30s"}`))
	f.Add([]byte(`{"requests":[{"url":"/v1/x","body":{}}],"timeout":1.5}`))
	f.Add([]byte(`{"requests":[{"custom_id":"a","url":"/v1/x","body":{}},{"custom_id":"a","url":"/v1/x","body":{}}]}`))
	f.Add([]byte(`{"requests":[]}`))
	f.Add([]byte(`{"requests":[{"url":"https://evil/","body":{}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ps := fuzzParser()
		b, err := ps.parseJSON(body)
		if err != nil {
			if b != nil || err.Error() == "" {
				t.Fatalf("error %v with batch %v", err, b)
			}
			return
		}
		if b.Format != FormatJSON {
			t.Fatal("wrong format")
		}
		checkAccepted(t, b, ps.maxItems)
	})
}

func FuzzParseJSONL(f *testing.F) {
	f.Add([]byte(`{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`+"\n"), "")
	f.Add([]byte(`{"custom_id":"r1","url":"/v1/x","body":{}}`+"\r\n\n"+`{"custom_id":"r2","url":"/v1/x","body":{}}`), "max_retries=1&timeout=2s&fallback=%7B%7D")
	f.Add([]byte(`{"custom_id":"r1","url":"/v1/x","body":{}}`), "priority=9")
	f.Add([]byte("not json\n"), "")
	f.Add([]byte(`{"url":"/v1/x","body":{}}`), "exit_on_error=true")
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		ps := fuzzParser()
		b, err := ps.parseJSONL(body, q)
		if err != nil {
			if b != nil || err.Error() == "" {
				t.Fatalf("error %v with batch %v", err, b)
			}
			return
		}
		checkAccepted(t, b, ps.maxItems)
		for i, it := range b.Items {
			if it.CustomID == "" {
				t.Fatalf("line item %d without custom_id", i)
			}
		}
	})
}

func FuzzParseTimeout(f *testing.F) {
	for _, s := range []string{`"30s"`, `30`, `0.5`, `"1.5"`, `-1`, `"1e400"`, `1e400`, `null`, `"abc"`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := parseTimeout(raw)
		if err == nil && (d <= 0 || d > maxTimeout) {
			t.Fatalf("%q accepted as %v", raw, d)
		}
	})
}
