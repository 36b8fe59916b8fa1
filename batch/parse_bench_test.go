package batch

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// BenchmarkParseLargeJSONBatch parses a batch of about 8 MiB and reports
// the bytes allocated per byte of body (alloc/body): what a large batch
// costs on top of its body while it is parsed.
func BenchmarkParseLargeJSONBatch(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"requests":[`)
	content := strings.Repeat("x", 8<<10)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"custom_id":"r%d","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":%q}]}}`, i, content)
	}
	sb.WriteString(`],"max_retries":2}`)
	body := []byte(sb.String())
	ps := fuzzParser()
	ps.maxItems = 1000
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		if _, err := ps.parseJSON(body); err != nil {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(len(body)), "alloc/body")
}
