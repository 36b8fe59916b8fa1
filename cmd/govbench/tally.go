package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// tally is the fate of the calls of a goodput run, from the clients'
// results and the provider's /stats.
type tally struct {
	total int // calls of the run, sent or not
	calls int // calls sent
	ok    int // answered 2xx
	// lost: sent, and no 2xx answer came back (an error status, an answer
	// cut short, no answer). The clients never retry, so each is a call
	// the application would have lost.
	lost   int
	causes map[string]int // lost calls by status code or "no answer"
	// unfinished: still running, or not sent, when the run was cut off at
	// its time limit (see -timeout-factor) or by Ctrl-C. Not counted lost.
	unfinished int
	// duplicated: calls the provider served more often than Governor says
	// it tried them. The clients send each call once with its own
	// X-Request-Id; mockllm counts requests per id (by_request_id) and
	// Governor reports its attempts in X-Governor-Attempts, so a call is
	// duplicated when the provider saw its id more times than that. As a
	// cross-check for calls without that header, the provider's 2xx
	// answers beyond the calls sent count too (the larger of the two
	// figures is reported). Beyond the calls sent, not the calls answered
	// 2xx: a call that did not end with a 2xx answer read whole (lost, or
	// unfinished because the run was cut off while the provider was
	// answering it) may have drawn one 2xx from the provider that never
	// reached its client. That is one execution of a call already counted
	// as lost or unfinished, not a second one.
	duplicated  int
	rateLimited int64 // 429s the provider answered
}

// per100 is the provider's 429s per 100 calls sent.
func (t tally) per100() float64 {
	if t.calls == 0 {
		return 0
	}
	return 100 * float64(t.rateLimited) / float64(t.calls)
}

// tallyCalls counts results against the provider's stats.
func tallyCalls(results []callResult, st mockStats) tally {
	t := tally{total: len(results), causes: map[string]int{}, rateLimited: st.RateLimited}
	idDup := 0
	for _, r := range results {
		switch {
		case !r.Sent:
			t.unfinished++
			continue
		case r.ok():
			t.ok++
		case r.cancelled():
			t.unfinished++
		default:
			t.lost++
			cause := "no answer"
			if r.Status != 0 {
				cause = strconv.Itoa(r.Status)
				if r.Err != nil {
					cause += " cut short"
				}
			}
			t.causes[cause]++
		}
		t.calls++
		if r.Attempts > 0 && st.ByRequestID[r.ID] > int64(r.Attempts) {
			idDup++
		}
	}
	t.duplicated = max(idDup, int(st.answered2xx())-t.calls, 0)
	return t
}

// callsText is the calls of the run, with how many did not finish when
// it was cut off: "7680 (5500 unfinished)".
func (t tally) callsText() string {
	if t.unfinished == 0 {
		return strconv.Itoa(t.total)
	}
	return fmt.Sprintf("%d (%d unfinished)", t.total, t.unfinished)
}

// lostText is the lost count with its causes, such as "3 (502: 2, no answer: 1)".
func (t tally) lostText() string {
	if t.lost == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(t.causes)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, t.causes[k]))
	}
	return fmt.Sprintf("%d (%s)", t.lost, strings.Join(parts, ", "))
}
