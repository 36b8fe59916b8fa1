package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// An answer larger than what MaxBufferedBytes has room for is not held
// whole: it reaches the client as the upstream sends it (its first half
// before the upstream sends the second), with its length when known, and
// holds no more of the budget than the room there was. An answer that
// fits is still read whole first.
func TestAnswersBeyondTheBufferBudgetAreStreamed(t *testing.T) {
	t.Parallel()
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) { testAnswerBeyondBudget(t, chunked) })
	}
}

func testAnswerBeyondBudget(t *testing.T, chunked bool) {
	checkLeaks(t)
	const half = 150 << 10
	body := `{"data":"` + strings.Repeat("x", 2*half) + `"}`
	second := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Small") != "" {
			_, _ = io.WriteString(w, `{"ok":true}`)
			return
		}
		if !chunked {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		_, _ = io.WriteString(w, body[:half])
		w.(http.Flusher).Flush()
		<-second
		_, _ = io.WriteString(w, body[half:])
	}))
	t.Cleanup(up.Close)
	release := sync.OnceFunc(func() { close(second) })
	t.Cleanup(release) // before up.Close, which waits for the handler
	// Held whole, the answer would wait for its second half, which waits
	// for the client to read the first: the attempt times out.
	p, base := startProxy(t, Config{Upstream: mustURL(t, up.URL), MaxBufferedBytes: 100 << 10, AttemptTimeout: 5 * time.Second, MaxRetries: -1})
	c := client(t)

	resp, out := chat(t, c, base, map[string]string{"X-Small": "1"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `{"ok":true}`, out)

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	req := `{"model":"m"}`
	_, err = fmt.Fprintf(conn, "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(req), req)
	require.NoError(t, err)
	r, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the head arrives before the upstream has sent the whole answer")
	defer r.Body.Close()
	assert.Equal(t, http.StatusOK, r.StatusCode)
	if !chunked {
		assert.EqualValues(t, len(body), r.ContentLength)
	}
	first := make([]byte, half)
	_, err = io.ReadFull(r.Body, first)
	require.NoError(t, err)
	assert.Equal(t, body[:half], string(first))
	assert.LessOrEqual(t, p.answers.held.Load(), int64(100<<10), "never beyond the budget")
	release()
	rest, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	assert.Equal(t, body[half:], string(rest))
	assert.Equal(t, "COMPLETED", r.Header.Get("X-Governor-Status"))
}

// Answers held whole have a budget of their own: while they fill it, calls
// whose bodies fit MaxBufferedBytes are still taken, and the next large
// answer is passed on as it arrives, its usage counted as it passes.
func TestAnswersHeldDoNotRefuseRequests(t *testing.T) {
	checkLeaks(t)
	answer := `{"data":"` + strings.Repeat("x", 300<<10) + `","usage":{"prompt_tokens":123,"completion_tokens":7,"total_tokens":130}}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(up.Close)
	set := metrics.NewSet()
	p, base := startProxy(t, Config{Upstream: mustURL(t, up.URL), MaxBufferedBytes: 100 << 10, Metrics: set})
	c := client(t)

	// Answers being written fill their budget.
	require.True(t, p.answers.take(p.answers.max))
	defer p.answers.give(p.answers.max)
	body := `{"model":"m","input":"` + strings.Repeat("y", 50<<10) + `"}`
	resp, out := post(t, c, base+"/v1/embeddings", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "a 50 KiB body fits the requests' budget: %.200s", out)
	assert.True(t, answer == string(out), "passed on whole, as it arrived: %d bytes of %d", len(out), len(answer))
	assert.Equal(t, 123, tokensOf(set, "prompt"), "the usage of an answer passed on as it arrives")
	assert.Equal(t, 7, tokensOf(set, "completion"))
	assert.Equal(t, p.answers.max, p.answers.held.Load(), "the answer took none of the full budget")
	assert.Zero(t, p.budget.held.Load(), "the request's body was given back")
}

// An answer of unknown length read whole holds the buffer it was read
// into, not only its bytes: that is what it takes from the budget.
func TestAnswerOfUnknownLengthTakesItsBuffer(t *testing.T) {
	for _, size := range []int{1, 5 << 10, 300 << 10, 1 << 20} {
		resp := fasthttp.AcquireResponse()
		resp.SetBodyStream(strings.NewReader(strings.Repeat("x", size)), -1)
		budget := &bodyBudget{max: 4 << 20}
		held, partial, stream, err := bufferAnswer(resp, 64<<20, budget)
		require.NoError(t, err)
		assert.False(t, stream, "%d bytes fit", size)
		assert.Nil(t, partial)
		assert.Equal(t, size, len(resp.Body()))
		assert.GreaterOrEqual(t, held, int64(cap(resp.Body())), "%d bytes: the buffer's capacity is taken", size)
		assert.Equal(t, held, budget.held.Load())
		fasthttp.ReleaseResponse(resp)
	}
}
