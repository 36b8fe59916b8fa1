package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// providerStats is the part of mockllm's GET /stats that govsoak reads.
type providerStats struct {
	Received         int64            `json:"received"`
	Answered         map[string]int64 `json:"answered"`
	RateLimited      int64            `json:"rate_limited"`
	StreamsStarted   int64            `json:"streams_started"`
	StreamsCompleted int64            `json:"streams_completed"`
	StreamsAborted   int64            `json:"streams_aborted"`
	Resets           int64            `json:"resets"`
	Hangs            int64            `json:"hangs"`
	MaxInFlight      int              `json:"max_in_flight"`
	ByRequestID      map[string]int64 `json:"by_request_id"`
}

// provider keeps the provider's count of requests per id. mockllm forgets
// the oldest ids past a bound, so the counts are polled during the run and
// merged: a finished call's count no longer changes, and one poll sees it
// before it ages out.
type provider struct {
	url string
	hc  *http.Client

	mu   sync.Mutex
	seen map[string]int64
	last providerStats
}

func newProvider(url string) *provider {
	return &provider{url: url, hc: &http.Client{Timeout: 30 * time.Second}, seen: map[string]int64{}}
}

// poll fetches /stats once and merges its counts.
func (p *provider) poll(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/stats", nil)
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return fmt.Errorf("provider stats: %w", err)
	}
	defer resp.Body.Close()
	var st providerStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Errorf("provider stats: %w", err)
	}
	p.merge(st)
	return nil
}

func (p *provider) merge(st providerStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, n := range st.ByRequestID {
		p.seen[id] = max(p.seen[id], n)
	}
	st.ByRequestID = nil
	p.last = st
}

// run polls every interval until ctx ends.
func (p *provider) run(ctx context.Context, every time.Duration, errs chan<- error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := p.poll(ctx); err != nil && ctx.Err() == nil {
				select {
				case errs <- err:
				default:
				}
			}
		}
	}
}

// counts returns the merged counts and the last totals.
func (p *provider) counts() (map[string]int64, providerStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen, p.last
}
