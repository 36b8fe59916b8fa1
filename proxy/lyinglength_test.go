package proxy

import (
	"bufio"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// streamedResponse reads the answer raw (its head and whatever body bytes
// follow, then the end of the connection) as the upstream client does,
// its body left as a stream.
func streamedResponse(t *testing.T, raw string) *fasthttp.Response {
	t.Helper()
	resp := fasthttp.AcquireResponse()
	t.Cleanup(func() { fasthttp.ReleaseResponse(resp) })
	resp.StreamBody = true
	require.NoError(t, resp.Read(bufio.NewReader(strings.NewReader(raw))))
	return resp
}

// allocatedBy returns the bytes f allocates.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// An answer read whole that announces far more than it sends (an error
// answer with Content-Length: 60000000, ten bytes, then the connection's
// end) holds about what it sent, not what it announced: the answers of
// errors and of batch items are read without a budget, so the announced
// lengths of a few such answers at once took a Governor past its memory.
// Room is made for the whole announced length at once only when the
// caller has reserved it.
func TestAnnouncedLengthIsNotAllocatedBeforeItArrives(t *testing.T) {
	const announced = 60_000_000
	raw := "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 60000000\r\n\r\n{\"error\":1"

	resp := streamedResponse(t, raw)
	var err error
	n := allocatedBy(func() { err = bufferBody(resp, 64<<20) })
	require.Error(t, err, "a body cut short")
	assert.Less(t, n, uint64(1<<20), "bytes allocated for a body that sent 10 of its %d", announced)

	// A body that arrives whole, larger than the pooled buffers, ends in
	// one buffer of its announced size: its growth stops there.
	const size = 3<<20 + 12345
	resp = streamedResponse(t, "HTTP/1.1 200 OK\r\nContent-Length: 3158073\r\n\r\n"+strings.Repeat("x", size))
	require.NoError(t, bufferBody(resp, 64<<20))
	assert.Equal(t, size, len(resp.Body()))
	assert.Equal(t, size, cap(resp.Body()), "the body's buffer ends at its announced size")
}
