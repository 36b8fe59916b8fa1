package lane

import (
	"fmt"
	"time"
)

// Info is one lane as GET /governor/lanes shows it.
type Info struct {
	ID         string  `json:"id"`
	Upstream   string  `json:"upstream"`
	Model      string  `json:"model"`
	Credential string  `json:"credential"` // a short hash, never the key
	Target     float64 `json:"target"`
	Limit      int     `json:"limit"`
	InFlight   int     `json:"in_flight"`
	// Held is how many of InFlight wait in their slots for a provider's
	// request or token budget before they are sent: InFlight - Held are
	// at the provider or on their way. The controller does not grow the
	// limit on answers that come while calls wait so (the budget, not
	// the limit, holds the lane back).
	Held            int            `json:"held"`
	Queued          int            `json:"queued"`
	QueuedByUrgency map[string]int `json:"queued_by_urgency"`
	LatencyEWMAMs   float64        `json:"latency_ewma_ms"`
	LastDecrease    *time.Time     `json:"last_decrease"`
	Collapsed       bool           `json:"collapsed"`
	Decreases       uint64         `json:"decreases"`
	Collapses       uint64         `json:"collapses"`
	PausedUntil     *time.Time     `json:"paused_until"`
	// LastDecreaseReason is the congestion signal behind this Governor's
	// last decrease or collapse: "rate_limited" (429 or 529), "timeout",
	// or "latency" (calls succeeded, but slowed down as the limit rose: a
	// provider that queues calls); empty if there was none.
	LastDecreaseReason string `json:"last_decrease_reason"`
	// LastDecreaseCause is the finer cause of the last cut of the lane's
	// limit, as governor_lane_decreases_by_cause_total labels it and the
	// "lane limit decreased" log line names it: rate_limited (a 429 that
	// named no exhausted budget), overloaded (529), request_budget,
	// token_budget (a 429 whose report showed that budget exhausted),
	// timeout, latency, or other_governor (another Governor's decrease of
	// a coordinated lane); empty if there was none.
	LastDecreaseCause string `json:"last_decrease_cause"`
	// RateLimited counts the lane's 429 and 529 answers, and Pauses the
	// times a provider's Retry-After paused it, since the lane was made.
	RateLimited uint64 `json:"rate_limited"`
	Pauses      uint64 `json:"pauses"`
	// Overloaded counts those of the RateLimited answers that said the
	// provider is overloaded (529, overloaded_error) rather than that the
	// account's limit is reached.
	Overloaded uint64 `json:"overloaded"`
	// Coordinated reports whether the lane is governed together with the
	// other Governors that use it (a Coordinator, and Redis reachable).
	// Then Target is the lane's shared target, SharedLimit the calls every
	// Governor together may have in flight, and Limit this Governor's
	// share of them. Otherwise SharedLimit is Limit.
	Coordinated bool `json:"coordinated"`
	SharedLimit int  `json:"shared_limit"`
	// Members is the number of Governors sharing the lane at the last
	// sync (0 when not coordinated).
	Members int `json:"members"`
	// Parked reports a coordinated lane that has had no call for a third
	// of the Redis lease: it has given its share up (Limit reads 0) and
	// syncs at a slow pace until its next call, which syncs it at once
	// and goes out once that sync gave the lane a share (or failed).
	Parked bool `json:"parked"`
	// ConnLimited reports that the calls in flight to the lane's upstream,
	// UpstreamInFlight summed over its lanes, fill its UpstreamMaxConns
	// connections (Config.MaxConnsPerUpstream): the lane's calls wait for
	// a connection whatever its limit.
	ConnLimited      bool `json:"conn_limited"`
	UpstreamInFlight int  `json:"upstream_in_flight"`
	UpstreamMaxConns int  `json:"upstream_max_conns"`
	// UpstreamConnectMs is the quickest a connection to the lane's
	// upstream has opened (about one network round trip to the provider);
	// 0 before the first. A new lane's start waits that long per step
	// beyond its admission window, since a refusal takes that long to
	// come back.
	UpstreamConnectMs float64 `json:"upstream_connect_ms"`
	// RequestBudget is the provider's request budget the lane paces its
	// calls by; nil until an answer has reported one it can pace by.
	RequestBudget *RequestBudgetInfo `json:"request_budget"`
	// TokenBudgets are the provider's token budgets the lane has learned
	// (from its headers or its 429s), each per minute with the estimate
	// of what is left now; empty until one is reported.
	TokenBudgets []TokenBudgetInfo `json:"token_budgets"`
	// Tenants are the tenants with calls waiting or in flight in the
	// lane, by name; past Config.MaxTenants the others are counted
	// together as queue.OtherTenants, last.
	Tenants []TenantInfo `json:"tenants"`
	// QueueCapacity is how many calls the lane's queue holds
	// (Config.QueueCapacity); beyond it calls are refused queue_full.
	QueueCapacity int `json:"queue_capacity"`
	// Failures counts the lane's attempts that got no usable answer
	// since it was made, by outcome (server_error, timeout,
	// connection_error, quota_exhausted), as governor_attempts_total
	// does; the "upstream attempt failed" log lines say why.
	Failures map[string]uint64 `json:"failures"`
	// Refused counts the calls Governor turned away from the lane since
	// it was made, by code (queue_full, queue_timeout), as
	// governor_lane_refused_total does.
	Refused map[string]uint64 `json:"refused"`
	// LimitedBy says what holds the lane's calls back now, when some
	// wait: "paused" (a provider's Retry-After), "token_budget" or
	// "request_budget" (calls held in their slots for the provider's
	// budget), "connections" (the upstream's connections are all in use:
	// calls in flight, or queued, wait for one),
	// or "limit" (the calls in flight fill the lane's limit: the
	// controller's, or this Governor's share of the shared one); empty
	// when no call waits, or none of these holds it.
	LimitedBy string `json:"limited_by"`
}

// What LimitedBy says holds a lane back.
const (
	LimitedByPause         = "paused"
	LimitedByTokenBudget   = "token_budget"
	LimitedByRequestBudget = "request_budget"
	LimitedByConnections   = "connections"
	LimitedByLimit         = "limit"
)

// limitedBy returns what holds li's waiting calls back (see
// Info.LimitedBy); connWaits counts its calls in flight that wait for a
// connection to the upstream.
func limitedBy(li *Info, connWaits int) string {
	switch {
	case li.Queued == 0 && li.Held == 0 && connWaits == 0:
		return ""
	case li.PausedUntil != nil:
		return LimitedByPause
	case li.Held > 0:
		return heldBy(li)
	case li.ConnLimited || connWaits > 0:
		return LimitedByConnections
	case li.InFlight >= li.Limit:
		return LimitedByLimit
	}
	return ""
}

// heldBy names the budget li's held calls wait for: an exhausted one, a
// token budget before the request budget.
func heldBy(li *Info) string {
	for _, b := range li.TokenBudgets {
		if b.Remaining < 1 {
			return LimitedByTokenBudget
		}
	}
	if li.RequestBudget != nil && li.RequestBudget.Remaining < 1 || len(li.TokenBudgets) == 0 {
		return LimitedByRequestBudget
	}
	return LimitedByTokenBudget
}

// TenantInfo is one tenant's share of a lane.
type TenantInfo struct {
	Tenant   string `json:"tenant"`
	Queued   int    `json:"queued"`
	InFlight int    `json:"in_flight"`
}

// info describes l at now; upstreamInFlight counts the calls in flight to
// its upstream.
func (r *Registry) info(l *Lane, now time.Time, upstreamInFlight int) Info {
	st := l.ctrl.State()
	qs := l.q.Stats()
	li := Info{
		ConnLimited:       r.connLimited(upstreamInFlight, qs.InFlight),
		UpstreamInFlight:  upstreamInFlight,
		UpstreamMaxConns:  r.cfg.MaxConnsPerUpstream,
		UpstreamConnectMs: float64(l.load.quickestOpen.Load()) / float64(time.Millisecond),
		ID:                l.id,
		Upstream:          l.key.Upstream,
		Model:             l.key.Model,
		Credential:        l.credHash,
		Target:            st.Target,
		Limit:             qs.Limit, // the controller's, or this Governor's share of it
		SharedLimit:       st.Limit,
		InFlight:          qs.InFlight,
		Held:              l.Held(),
		Queued:            qs.Waiting,
		QueuedByUrgency:   map[string]int{},
		Tenants:           []TenantInfo{},
		LatencyEWMAMs:     float64(st.LatencyEWMA) / float64(time.Millisecond),
		Collapsed:         st.Collapsed,
		Decreases:         st.Decreases,
		Collapses:         st.Collapses,
		RateLimited:       l.m.attempts[RateLimited].Get(),
		Pauses:            l.m.pauses.Get(),
		Overloaded:        l.m.overloaded.Get(),
	}
	li.RequestBudget = l.pace.info(now)
	li.TokenBudgets = l.tokens.info(now)
	if li.TokenBudgets == nil {
		li.TokenBudgets = []TokenBudgetInfo{}
	}
	if l.co != nil {
		l.mu.Lock()
		li.Coordinated, li.Members, li.Parked = l.co.joined, l.co.members, l.co.parked.Load()
		if !l.co.joined {
			li.Members = 0
		} else {
			// The shared limit as of the last sync: the controller's
			// own has grown or been cut since, and is shared at the next.
			li.SharedLimit = max(1, int(l.co.sharedTarget))
		}
		l.mu.Unlock()
	}
	for _, t := range l.q.Tenants() {
		li.Tenants = append(li.Tenants, TenantInfo{Tenant: t.Name, Queued: t.Waiting, InFlight: t.InFlight})
	}
	for u, n := range qs.WaitingByUrgency {
		if n > 0 {
			li.QueuedByUrgency[fmt.Sprintf("u=%d", u)] = n
		}
	}
	if !st.LastDecrease.IsZero() {
		t := st.LastDecrease
		li.LastDecrease = &t
		li.LastDecreaseReason = decreaseReason(st.DecreaseCause)
	}
	if c := l.lastCause.Load(); c > 0 {
		li.LastDecreaseCause = Cause(c - 1).String()
	}
	if qs.PausedUntil.After(now) {
		t := qs.PausedUntil
		li.PausedUntil = &t
	}
	li.QueueCapacity = r.cfg.QueueCapacity
	li.Failures = make(map[string]uint64, 4)
	for _, o := range []Outcome{ServerError, Timeout, ConnError, Quota} {
		li.Failures[o.String()] = l.m.attempts[o].Get()
	}
	li.Refused = make(map[string]uint64, numTurnaways)
	for w := range numTurnaways {
		li.Refused[w.String()] = l.m.refused[w].Get()
	}
	li.LimitedBy = limitedBy(&li, l.connWaits.count())
	return li
}
