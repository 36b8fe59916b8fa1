package batch_test

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/mockllm"
)

var (
	jobItems  = flag.Int("job-items", 2000, "BenchmarkAsyncJobMemory: items of the job")
	jobTokens = flag.Int("job-answer-tokens", 4096, "BenchmarkAsyncJobMemory: max_tokens of each item (about 4 bytes of answer each)")
)

// BenchmarkAsyncJobMemory measures what an async job's results cost in
// memory as they grow: Go's heap in use (after a collection) when 10%,
// 50% and 100% of the items have finished, and its peak while the results
// are read back. Kept in memory, the heap grows with the answers; with a
// batch directory it stays flat. Run it once per mode with large answers:
//
//	go test ./batch -run '^$' -bench AsyncJobMemory -benchtime 1x \
//	  -job-items 50000 -job-answer-tokens 4096
func BenchmarkAsyncJobMemory(b *testing.B) {
	for _, mode := range []string{"memory", "dir"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				benchJobMemory(b, mode)
			}
		})
	}
}

func benchJobMemory(b *testing.B, mode string) {
	n := *jobItems
	idle := heapInUse()
	e := newEnv(b, envOptions{
		mock: mockllm.Config{FillMaxTokens: true},
		batch: func(c *batch.Config) {
			c.MaxItems = max(n, batch.DefaultMaxItems)
			c.MaxResultBytes = 1 << 40 // the heap's growth is what is measured
			if mode == "dir" {
				c.Dir = b.TempDir()
			}
		},
	})
	var body strings.Builder
	for i := range n {
		fmt.Fprintf(&body, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"q%d"}]}}`+"\n", i, *jobTokens, i)
	}
	resp, out := e.post(b, batch.PathBatches, "application/jsonl", body.String())
	require.Equal(b, http.StatusAccepted, resp.StatusCode, out)
	body.Reset()
	var st batch.JobStatus
	require.NoError(b, json.Unmarshal([]byte(out), &st))

	marks := []int{n / 10, n / 2, n}
	heap := make([]uint64, len(marks))
	for k, mark := range marks {
		for {
			_, out := e.do(b, http.MethodGet, batch.PathBatches+"/"+st.ID, "", "")
			var now batch.JobStatus
			require.NoError(b, json.Unmarshal([]byte(out), &now))
			done := now.Counts["COMPLETED"] + now.Counts["COMPLETED_WITH_RETRIES"] + now.Counts["FAILED"] + now.Counts["DID_NOT_RUN"]
			if done >= mark {
				require.Equal(b, 0, now.Counts["FAILED"], "%v", now.Counts)
				break
			}
			time.Sleep(20 * time.Millisecond) // polling the job, as a client does
		}
		heap[k] = heapInUse()
	}

	// Read the results back, sampling the heap as they stream.
	req, err := http.NewRequest(http.MethodGet, e.base+batch.PathBatches+"/"+st.ID+"/results", nil)
	require.NoError(b, err)
	res, err := e.c.Do(req)
	require.NoError(b, err)
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	var lines int
	var bytes int64
	var peak uint64
	for sc.Scan() {
		lines++
		bytes += int64(len(sc.Bytes()) + 1)
		if lines%max(n/10, 1) == 0 {
			peak = max(peak, heapInUse())
		}
	}
	require.NoError(b, sc.Err())
	require.Equal(b, n, lines)

	mib := func(v uint64) float64 { return float64(v) / (1 << 20) }
	b.ReportMetric(mib(idle), "idle-heap-MiB")
	b.ReportMetric(mib(heap[0]), "heap-MiB@10%")
	b.ReportMetric(mib(heap[1]), "heap-MiB@50%")
	b.ReportMetric(mib(heap[2]), "heap-MiB@100%")
	b.ReportMetric((float64(heap[2])-float64(heap[0]))/float64(marks[2]-marks[0]), "heap-B/item")
	b.ReportMetric(mib(peak), "read-peak-heap-MiB")
	b.ReportMetric(float64(bytes)/(1<<20), "results-MiB")
}

// heapInUse is the Go heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
