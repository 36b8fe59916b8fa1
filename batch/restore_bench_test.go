package batch_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/batch/journal"
)

var (
	restoreJobs  = flag.Int("restore-jobs", 8, "BenchmarkRestoreMemory: finished jobs in the batch directory")
	restoreItems = flag.Int("restore-items", 20000, "BenchmarkRestoreMemory: results of each job")
)

// BenchmarkRestoreMemory measures the heap a start-up takes to list again
// the finished jobs of a batch directory: its peak above the heap before
// (sampled every millisecond), for a directory of one job and for one of
// -restore-jobs jobs, each of -restore-items results (about 1 KB each).
// Jobs are read one at a time, so the peak follows the largest job, not
// the directory:
//
//	go test ./batch -run '^$' -bench RestoreMemory -benchtime 1x \
//	  -restore-jobs 20 -restore-items 50000
func BenchmarkRestoreMemory(b *testing.B) {
	for _, jobs := range []int{1, *restoreJobs} {
		b.Run(fmt.Sprintf("jobs=%d", jobs), func(b *testing.B) {
			dir := b.TempDir()
			fillBatchDir(b, dir, jobs, *restoreItems)
			for range b.N {
				base := heapInUse()
				stop := make(chan struct{})
				peak := make(chan uint64)
				go func() { peak <- samplePeakHeap(stop) }()
				e := newEnv(b, envOptions{batch: func(c *batch.Config) { c.Dir = dir }})
				close(stop)
				p := <-peak
				e.stop()
				b.ReportMetric(float64(p-min(p, base))/(1<<20), "peak-MiB")
			}
		})
	}
}

// samplePeakHeap returns the largest heap seen until stop is closed.
func samplePeakHeap(stop <-chan struct{}) uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(s)
		peak = max(peak, s[0].Value.Uint64())
		select {
		case <-stop:
			return peak
		case <-t.C:
		}
	}
}

// fillBatchDir writes jobs finished jobs of items results each, as a
// Governor would have recorded them.
func fillBatchDir(b *testing.B, path string, jobs, items int) {
	d, err := journal.Open(path)
	require.NoError(b, err)
	defer d.Close()
	body := []byte(`{"object":"chat.completion","choices":[{"message":{"content":"` + strings.Repeat("a", 600) + `"}}]}`)
	now := time.Now().UTC()
	for j := range jobs {
		id := fmt.Sprintf("batch_%016x", j+1)
		header, err := json.Marshal(map[string]any{"id": id, "created": now, "format": 1,
			"options": map[string]any{"MaxRetries": -1, "Fallback": nil, "Urgency": 5, "Tenant": id}})
		require.NoError(b, err)
		jj, err := d.Create(id, items, header, []byte("[]"), []byte(`{"creds":{}}`))
		require.NoError(b, err)
		// Many writers share each fsync.
		var wg sync.WaitGroup
		for w := range 64 {
			wg.Go(func() {
				for i := w; i < items; i += 64 {
					meta := fmt.Sprintf(`{"custom_id":"c%d","status":"COMPLETED","attempts":1,"queue_ns":1234567,"execution_ns":456789012,"status_code":200,"content_type":"application/json","request_id":"req_0123456789abcdef01234567","lane":"default/m/2a73a8892740"}`, i)
					if err := jj.Put(i, []byte(meta), body); err != nil {
						panic(err)
					}
				}
			})
		}
		wg.Wait()
		end, err := json.Marshal(map[string]any{"started": now, "finished": now})
		require.NoError(b, err)
		require.NoError(b, jj.Finish(end))
		jj.Close()
	}
}
