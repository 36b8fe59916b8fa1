package mockllm_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgovernor/governor/mockllm"
)

// discardWriter is a ResponseWriter that keeps nothing, so that benchmarks
// measure the server rather than a recorder.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

func benchHandler(b *testing.B, body string) {
	s := mockllm.New(mockllm.Config{MaxConcurrency: 1 << 20, Rate: 1e9})
	defer s.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
			clear(w.h)
			s.ServeHTTP(w, r)
		}
	})
}

func BenchmarkServeChatJSON(b *testing.B)   { benchHandler(b, chatBody) }
func BenchmarkServeChatStream(b *testing.B) { benchHandler(b, chatStreamBody) }

// BenchmarkRoundTrip measures whole requests over loopback, as a load test
// sees them.
func BenchmarkRoundTrip(b *testing.B) {
	_, url, stop, err := mockllm.Start(mockllm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	body := []byte(chatBody)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
