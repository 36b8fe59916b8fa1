package batch

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llmgovernor/governor/proxy"
)

// serverMetrics are the batch API's series.
type serverMetrics struct {
	batches  map[string]*metrics.Counter       // by mode: sync, progress, async
	items    map[proxy.Status]*metrics.Counter // finished items by status
	rejected *metrics.Counter                  // batches refused as bad input
}

func newServerMetrics(set *metrics.Set, jobs *jobStore, live *liveBatches, budget *resultBudget) *serverMetrics {
	m := &serverMetrics{batches: map[string]*metrics.Counter{}, items: map[proxy.Status]*metrics.Counter{}}
	for _, mode := range []string{"sync", "progress", "async"} {
		m.batches[mode] = set.NewCounter(fmt.Sprintf(`governor_batches_total{mode=%q}`, mode))
	}
	for _, st := range []proxy.Status{proxy.StatusCompleted, proxy.StatusCompletedWithRetries, proxy.StatusFailed, proxy.StatusDidNotRun} {
		m.items[st] = set.NewCounter(fmt.Sprintf(`governor_batch_items_total{status=%q}`, st))
	}
	m.rejected = set.NewCounter(`governor_batches_rejected_total`)
	set.NewGauge(`governor_batch_jobs{state="running"}`, func() float64 { r, _ := jobs.counts(); return float64(r) })
	set.NewGauge(`governor_batch_jobs{state="finished"}`, func() float64 { _, f := jobs.counts(); return float64(f) })
	set.NewGauge(`governor_batch_items_pending`, func() float64 { return float64(jobs.pendingItems() + live.pendingItems()) })
	set.NewGauge(`governor_batch_results_memory_bytes`, func() float64 { return float64(budget.bytes()) })
	return m
}
