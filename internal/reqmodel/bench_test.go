package reqmodel

import (
	"strconv"
	"strings"
	"testing"
)

// BenchmarkOf measures reading the model of a request body, small
// and with a 10 KB prompt: the scan checks the whole body's syntax.
func BenchmarkOf(b *testing.B) {
	for _, n := range []int{1, 250} {
		body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` +
			strings.Repeat("Lorem ipsum dolor sit amet, consectetur. ", n) + `"}],"stream":false}`)
		b.Run(strconv.Itoa(len(body))+"B", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				_ = Of(body)
			}
		})
	}
}
