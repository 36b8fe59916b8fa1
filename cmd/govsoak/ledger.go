package main

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// kind is the sort of call a record is for.
type kind string

const (
	kindChat            kind = "chat (JSON)"
	kindStream          kind = "chat (SSE stream)"
	kindAnthropic       kind = "anthropic (JSON)"
	kindAnthropicStream kind = "anthropic (SSE stream)"
	kindBatchItem       kind = "sync batch item"
	kindAsyncItem       kind = "async batch item"
)

var kinds = []kind{kindChat, kindStream, kindAnthropic, kindAnthropicStream, kindBatchItem, kindAsyncItem}

// outcome is how a call ended, seen from its client.
type outcome int

const (
	// completed: the provider's whole, successful answer.
	completed outcome = iota
	// failed: an answer that says why it failed: Governor's own error, or
	// the provider's last answer once the retry budget was spent.
	failed
	// lost: no complete answer at all.
	lost
)

// record is one call or batch item.
type record struct {
	id       string
	kind     kind
	outcome  outcome
	attempts int    // as Governor reported them; 0 if it reported none
	why      string // for failed and lost: what was seen
	took     time.Duration
}

// ledger collects the records of a run. Safe for concurrent use.
type ledger struct {
	mu      sync.Mutex
	records []record
}

func (l *ledger) add(r record) {
	l.mu.Lock()
	l.records = append(l.records, r)
	l.mu.Unlock()
}

func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.records)
}

// tally is the verdict of a run.
type tally struct {
	byKind     map[kind]*kindTally
	calls      int
	completed  int
	failed     int
	lost       int
	duplicated int // the provider saw the id more often than Governor's attempts
	unseen     int // Governor reported more attempts than the provider saw
	attempts   int // Governor's attempts, summed
	sent       int // the provider's requests for these ids, summed
	examples   []string
}

type kindTally struct {
	calls, completed, failed, lost, duplicated int
	took                                       []time.Duration
}

// percentile returns the p-th percentile (0..1) of the times taken.
func (k *kindTally) percentile(p float64) time.Duration {
	if len(k.took) == 0 {
		return 0
	}
	sorted := slices.Clone(k.took)
	slices.Sort(sorted)
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// maxExamples bounds the examples of lost, failed and duplicated calls
// kept for the report.
const maxExamples = 10

// check compares the records with the provider's count of requests per
// id.
func (l *ledger) check(seen map[string]int64) tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := tally{byKind: map[kind]*kindTally{}}
	for _, k := range kinds {
		t.byKind[k] = &kindTally{}
	}
	example := func(format string, args ...any) {
		if len(t.examples) < maxExamples {
			t.examples = append(t.examples, fmt.Sprintf(format, args...))
		}
	}
	for _, r := range l.records {
		kt := t.byKind[r.kind]
		t.calls++
		kt.calls++
		kt.took = append(kt.took, r.took)
		switch r.outcome {
		case completed:
			t.completed++
			kt.completed++
		case failed:
			t.failed++
			kt.failed++
			example("failed %s %s: %s", r.kind, r.id, r.why)
		case lost:
			t.lost++
			kt.lost++
			example("lost %s %s: %s", r.kind, r.id, r.why)
		}
		n := int(seen[r.id])
		t.attempts += r.attempts
		t.sent += n
		switch {
		case r.attempts > 0 && n > r.attempts: // unknown for a call with no answer
			t.duplicated++
			kt.duplicated++
			example("duplicated %s %s: the provider saw it %d times, Governor reported %d attempts", r.kind, r.id, n, r.attempts)
		case n < r.attempts:
			t.unseen++
		}
	}
	sort.Strings(t.examples)
	return t
}
