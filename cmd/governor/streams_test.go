package main

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// 3,000 streams at once through one Governor, half of whose clients leave
// after the first event: every call is answered, each reaches the provider
// once, the streams read to their end arrive whole, the streams left
// behind are closed at the provider (each stream the provider began it
// completed or saw aborted), and nothing stays in flight or open:
// the lane's slots, the provider's places and Governor's goroutines all
// come back.
func TestThreeThousandConcurrentStreams(t *testing.T) {
	const streams = 3000
	var rl syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl))
	if rl.Cur < 3*streams+1000 {
		t.Skipf("needs %d open files, the limit is %d", 3*streams+1000, rl.Cur)
	}
	mock, mockURL := startMock(t, mockllm.Config{Latency: 100 * time.Millisecond, StreamChunks: 10, ChunkDelay: 50 * time.Millisecond})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_MAX_CONCURRENCY=4000", "GOVERNOR_MAX_CONNS_PER_UPSTREAM=4000",
		"GOVERNOR_AIMD_INITIAL=4000")
	before := goroutines(t, g)

	tr := &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
		whole    int
		failures []string
	)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(s string) { mu.Lock(); failures = append(failures, s); mu.Unlock() }
			req, _ := http.NewRequest("POST", "http://"+g.base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("X-Request-Id", "s-"+strconv.Itoa(i))
			resp, err := c.Do(req)
			if err != nil {
				fail(err.Error())
				return
			}
			defer resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
			if i%2 == 0 {
				// The client leaves after the first event.
				if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
					fail(err.Error())
				}
				return
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
				fail("a stream read to its end is not whole: " + strings.TrimSpace(string(b[max(0, len(b)-40):])))
				return
			}
			mu.Lock()
			whole++
			mu.Unlock()
		}()
	}
	wg.Wait()
	tr.CloseIdleConnections()
	assert.Empty(t, failures, "every call is answered")
	assert.Equal(t, map[int]int{200: streams}, statuses)
	assert.Equal(t, streams/2, whole, "the streams read to their end arrive whole")

	require.Eventually(t, func() bool {
		st := mock.Stats()
		inFlight, queued := laneTotals(t, g)
		return st.InFlight == 0 && st.StreamsCompleted+st.StreamsAborted == streams && inFlight == 0 && queued == 0
	}, 60*time.Second, 50*time.Millisecond, "nothing stays in flight")
	st := mock.Stats()
	assert.EqualValues(t, streams, st.Received, "each call reached the provider once")
	assert.Len(t, st.ByRequestID, streams)
	// fasthttp keeps an idle worker goroutine for 10 s after its
	// connection closes.
	require.Eventually(t, func() bool { return goroutines(t, g) <= before+5 }, 60*time.Second, 100*time.Millisecond,
		"Governor's goroutines come back (%d before)", before)
}

// goroutines reads go_goroutines from Governor's /metrics.
func goroutines(t *testing.T, g *governorProcess) int {
	t.Helper()
	resp, err := oneShot.Get("http://" + g.admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}
