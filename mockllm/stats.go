package mockllm

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Stats is a snapshot of what the provider saw and did since New or the last
// Reset. Only API requests count (everything but /stats).
type Stats struct {
	// Received counts API requests, answered or not.
	Received int64 `json:"received"`
	// Answered counts answers by status code; a stream counts when it starts.
	Answered map[int]int64 `json:"answered"`
	// InFlight is the number of admitted requests being served now.
	InFlight int `json:"in_flight"`
	// MaxInFlight is the peak of InFlight.
	MaxInFlight int `json:"max_in_flight"`
	// RateLimited counts 429 answers, forced ones included.
	RateLimited int64 `json:"rate_limited"`
	// StreamsStarted, StreamsCompleted and StreamsAborted count streamed
	// answers; a stream is aborted when its client goes away or a write
	// fails before the last event.
	StreamsStarted   int64 `json:"streams_started"`
	StreamsCompleted int64 `json:"streams_completed"`
	StreamsAborted   int64 `json:"streams_aborted"`
	// StreamsOverloaded counts the aborted streams that the provider
	// ended with its overload error event (the overload-mid-stream fault).
	StreamsOverloaded int64 `json:"streams_overloaded"`
	// ClientGone counts requests whose client went away before an answer
	// started (during the latency wait or a hang).
	ClientGone int64 `json:"client_gone"`
	// Resets counts connections closed with a TCP RST on purpose, mid-stream
	// resets included.
	Resets int64 `json:"resets"`
	// Hangs counts requests that hung on purpose, mid-stream hangs included.
	Hangs int64 `json:"hangs"`
	// ByRequestID counts requests per X-Request-Id header (bounded; the
	// oldest ids are forgotten first).
	ByRequestID map[string]int64 `json:"by_request_id"`
	// MaxRetryCount is the largest x-stainless-retry-count header seen, and
	// RetryCountNonzero the number of requests where it was above zero.
	MaxRetryCount     int64 `json:"max_retry_count"`
	RetryCountNonzero int64 `json:"retry_count_nonzero"`
	// LastHeaders are the headers of the last API request, names in lower
	// case, values of repeated headers joined with ", ". Host is included.
	LastHeaders map[string]string `json:"last_headers"`
	// Limits are the limits in force now.
	Limits Limits `json:"limits"`
}

// maxStatus bounds the status codes counted in Answered.
const maxStatus = 600

// counters are the atomic counters behind Stats.
type counters struct {
	received          atomic.Int64
	rateLimited       atomic.Int64
	streamsStarted    atomic.Int64
	streamsCompleted  atomic.Int64
	streamsAborted    atomic.Int64
	streamsOverloaded atomic.Int64
	clientGone        atomic.Int64
	resets            atomic.Int64
	hangs             atomic.Int64
	maxRetryCount     atomic.Int64
	retryCountNonzero atomic.Int64
	answered          [maxStatus]atomic.Int64
	lastHeaders       atomic.Pointer[recordedHeaders]
}

type recordedHeaders struct {
	host   string
	header http.Header
}

func (c *counters) reset() {
	for _, v := range []*atomic.Int64{
		&c.received, &c.rateLimited, &c.streamsStarted, &c.streamsCompleted,
		&c.streamsAborted, &c.streamsOverloaded, &c.clientGone, &c.resets, &c.hangs,
		&c.maxRetryCount, &c.retryCountNonzero,
	} {
		v.Store(0)
	}
	for i := range c.answered {
		c.answered[i].Store(0)
	}
	c.lastHeaders.Store(nil)
}

func (c *counters) answer(status int) {
	if status >= 0 && status < maxStatus {
		c.answered[status].Add(1)
	}
	if status == http.StatusTooManyRequests {
		c.rateLimited.Add(1)
	}
}

// observe records what every API request carries: its headers and the SDK's
// retry count.
func (c *counters) observe(r *http.Request) {
	c.received.Add(1)
	c.lastHeaders.Store(&recordedHeaders{host: r.Host, header: r.Header.Clone()})
	if v := r.Header.Get("X-Stainless-Retry-Count"); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err == nil && n > 0 {
			c.retryCountNonzero.Add(1)
			for {
				cur := c.maxRetryCount.Load()
				if n <= cur || c.maxRetryCount.CompareAndSwap(cur, n) {
					break
				}
			}
		}
	}
}

func (c *counters) snapshot() Stats {
	st := Stats{
		Received:          c.received.Load(),
		Answered:          map[int]int64{},
		RateLimited:       c.rateLimited.Load(),
		StreamsStarted:    c.streamsStarted.Load(),
		StreamsCompleted:  c.streamsCompleted.Load(),
		StreamsAborted:    c.streamsAborted.Load(),
		StreamsOverloaded: c.streamsOverloaded.Load(),
		ClientGone:        c.clientGone.Load(),
		Resets:            c.resets.Load(),
		Hangs:             c.hangs.Load(),
		MaxRetryCount:     c.maxRetryCount.Load(),
		RetryCountNonzero: c.retryCountNonzero.Load(),
		LastHeaders:       map[string]string{},
	}
	for i := range c.answered {
		if n := c.answered[i].Load(); n > 0 {
			st.Answered[i] = n
		}
	}
	if rh := c.lastHeaders.Load(); rh != nil {
		for k, v := range rh.header {
			st.LastHeaders[strings.ToLower(k)] = strings.Join(v, ", ")
		}
		if rh.host != "" {
			st.LastHeaders["host"] = rh.host
		}
	}
	return st
}

// maxIDLen bounds the length of a request id kept in memory.
const maxIDLen = 256

// idCounter counts requests per request id in bounded memory: two
// generations of at most limit ids each; when the current one is full it
// becomes the old one and the oldest is dropped. An id seen again moves to
// the current generation, so the ids of a live retry sequence are kept.
type idCounter struct {
	mu    sync.Mutex
	limit int
	cur   map[string]int64
	old   map[string]int64
}

func newIDCounter(limit int) *idCounter {
	return &idCounter{limit: limit, cur: map[string]int64{}, old: map[string]int64{}}
}

// inc counts one more request with id and returns its count: the attempt
// number, from 1.
func (c *idCounter) inc(id string) int64 {
	if len(id) > maxIDLen {
		id = id[:maxIDLen]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.cur[id]
	if !ok {
		if n, ok = c.old[id]; ok {
			delete(c.old, id)
		}
		if len(c.cur) >= c.limit {
			c.old, c.cur = c.cur, make(map[string]int64, len(c.cur))
		}
	}
	n++
	c.cur[id] = n
	return n
}

func (c *idCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur, c.old = map[string]int64{}, map[string]int64{}
}

func (c *idCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int64, len(c.cur)+len(c.old))
	for k, v := range c.old {
		m[k] = v
	}
	for k, v := range c.cur {
		m[k] = v
	}
	return m
}
