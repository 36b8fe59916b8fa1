package mockllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds a request body.
const maxBody = 32 << 20

// maxTrackedIDs bounds the request ids kept for Stats.ByRequestID and for
// X-Mock-Fault sequences.
const maxTrackedIDs = 100_000

// Server is the simulated provider, an http.Handler. Make one with New or
// Start; the zero value is not usable. It is safe for concurrent use. Its only goroutines are those of net/http and, after Start,
// the one serving the listener; Close ends them all.
type Server struct {
	cfg   Config
	now   func() time.Time
	lim   *limiter
	ids   *idCounter
	stats counters
	rng   atomic.Uint64

	release     chan struct{} // closed to end hangs (Shutdown, Close)
	done        chan struct{} // closed by Close to end every wait
	releaseOnce sync.Once
	closeOnce   sync.Once

	mu       sync.RWMutex
	closed   bool
	servers  []*http.Server
	handlers sync.WaitGroup // ServeHTTP calls in progress
	serving  sync.WaitGroup // the goroutine of Start
}

// New returns a provider simulated as cfg says. It panics if cfg is invalid
// (see Config.Validate).
func New(cfg Config) *Server {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if cfg.StreamChunks == 0 {
		cfg.StreamChunks = defaultStreamChunks
	}
	s := &Server{
		cfg:     cfg,
		now:     time.Now,
		ids:     newIDCounter(maxTrackedIDs / 2),
		release: make(chan struct{}),
		done:    make(chan struct{}),
	}
	seed := uint64(cfg.Seed)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	s.rng.Store(seed)
	s.lim = newLimiter(cfg, s.now())
	return s
}

// Start serves a new provider on a free port of 127.0.0.1 and returns it with
// its base URL (http://127.0.0.1:PORT) and a stop function, which is
// s.Close.
func Start(cfg Config) (s *Server, baseURL string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, fmt.Errorf("mockllm: listen: %w", err)
	}
	s = New(cfg)
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		_ = s.Serve(ln) // ends with http.ErrServerClosed when s closes
	}()
	return s, "http://" + ln.Addr().String(), s.Close, nil
}

// Serve answers the connections of ln until Shutdown or Close, after which
// it returns http.ErrServerClosed. It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return http.ErrServerClosed
	}
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	return srv.Serve(ln)
}

// Shutdown stops accepting connections, ends hung requests at once and waits
// until the others are answered or ctx ends; then it closes s.
func (s *Server) Shutdown(ctx context.Context) error {
	s.releaseHangs()
	s.mu.RLock()
	servers := append([]*http.Server(nil), s.servers...)
	s.mu.RUnlock()
	var err error
	for _, srv := range servers {
		if e := srv.Shutdown(ctx); e != nil && err == nil {
			err = e
		}
	}
	s.Close()
	return err
}

// Close ends hung and waiting requests (their connections are broken), closes
// the listeners and connections of Serve, and waits until every ServeHTTP
// call and Serve goroutine started by Start has returned. Requests arriving
// after Close get 503. Close is idempotent.
//
// A Server mounted in an httptest.Server must be closed before it: the
// latter's Close waits for the requests that Close ends.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		servers := s.servers
		s.mu.Unlock()
		s.releaseHangs()
		close(s.done)
		for _, srv := range servers {
			_ = srv.Close() // it can only report the listener's close error
		}
	})
	s.serving.Wait()
	s.handlers.Wait()
}

func (s *Server) releaseHangs() {
	s.releaseOnce.Do(func() { close(s.release) })
}

// enter registers a ServeHTTP call; it reports false once s is closed.
func (s *Server) enter() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	s.handlers.Add(1)
	return true
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	st := s.stats.snapshot()
	st.ByRequestID = s.ids.snapshot()
	st.Limits, st.InFlight, st.MaxInFlight = s.lim.snapshot(s.now())
	return st
}

// Reset zeroes the counters and restarts the schedule: phase offsets count
// from now and the limits return to the Config's. Requests in flight stay
// counted in InFlight.
func (s *Server) Reset() {
	s.stats.reset()
	s.ids.reset()
	s.lim.restart(s.now())
}

// ServeHTTP answers the provider's API and /stats.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		writeBody(w, http.StatusServiceUnavailable, apiError{
			status: http.StatusServiceUnavailable, typ: "server_error", anthropicType: "api_error",
			code: "server_closed", message: "The simulated provider is shutting down.",
		}.body(shapeOf(r.URL.Path)))
		return
	}
	defer s.handlers.Done()
	switch r.URL.Path {
	case "/stats", "/stats/reset":
		s.serveStats(w, r)
		return
	}
	s.serveAPI(w, r)
}

func (s *Server) serveStats(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/stats" && r.Method == http.MethodGet:
		b, err := json.Marshal(s.Stats())
		if err != nil {
			panic(err) // maps of strings and numbers always marshal
		}
		writeBody(w, http.StatusOK, b)
	case r.URL.Path == "/stats" && r.Method == http.MethodDelete,
		r.URL.Path == "/stats/reset" && r.Method == http.MethodPost:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeBody(w, http.StatusMethodNotAllowed, errMethod(r).body(shapeOpenAI))
	}
}

// fail writes an error answer.
func (s *Server) fail(w http.ResponseWriter, sh shape, e apiError) {
	s.stats.answer(e.status)
	writeBody(w, e.status, e.body(sh))
}

// apiRequest is a request to the API that accept let through.
type apiRequest struct {
	sh   shape
	ep   endpoint
	mock mockHeaders
	body []byte
}

// accept checks what every endpoint checks before anything is counted
// against the limits: the path and method, the mock headers and the body.
// It answers a request that fails a check, and reports whether it passed.
func (s *Server) accept(w http.ResponseWriter, r *http.Request) (apiRequest, bool) {
	var attempt int64
	if id := r.Header.Get(HeaderRequestID); id != "" {
		attempt = s.ids.inc(id)
	}
	sh := shapeOf(r.URL.Path)
	ep, ok := route(r.URL.Path)
	if !ok {
		s.fail(w, sh, errNotFound(r))
		return apiRequest{}, false
	}
	if r.Method != ep.method {
		w.Header().Set("Allow", ep.method)
		s.fail(w, sh, errMethod(r))
		return apiRequest{}, false
	}
	mock, err := parseMock(r.Header, attempt)
	if err != nil {
		s.fail(w, sh, errInvalid("invalid_mock_header", err.Error()))
		return apiRequest{}, false
	}
	body, aerr := readBody(w, r)
	if aerr != nil {
		s.fail(w, sh, *aerr)
		return apiRequest{}, false
	}
	return apiRequest{sh: sh, ep: ep, mock: mock, body: body}, true
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	s.stats.observe(r)
	req, ok := s.accept(w, r)
	if !ok {
		return
	}
	sh, mock := req.sh, req.mock

	// The answer is built first, for what it costs the token budgets; a
	// body it cannot answer is refused after the limits and forced
	// faults have had their say, as before any cost was known.
	ans, buildErr := req.ep.build(req.body, buildOptions{chunks: s.cfg.StreamChunks, fill: s.cfg.FillMaxTokens})
	now := s.now()
	adm := s.lim.admit(now, ans.cost)
	if !s.cfg.NoRateLimitHeaders {
		setRateHeaders(w.Header(), adm, sh, now)
		setTokenHeaders(w.Header(), adm, sh, now)
	}
	if !adm.ok {
		s.refuse(w, sh, adm, ans.model)
		return
	}
	// The place is given back once the answer is generated, before its
	// last bytes are written (a reset: before the client sees it), so a
	// client that has read a whole answer finds the place free again,
	// and /stats never shows a finished request in flight.
	var once sync.Once
	unused := ans.cost.output - ans.output
	release := func() { once.Do(func() { s.lim.release(unused) }) }
	defer release()

	f := mock.fault
	if !mock.forced && s.hasFaults() {
		f = randomFault(s.cfg.Faults, s.uniform())
	}
	ctx := r.Context()
	if f.immediate() {
		if f.kind == faultHang {
			switch s.hang(ctx) {
			case waitClientGone:
				s.stats.clientGone.Add(1)
			case waitClosed:
				resetConn(w)
			}
			return
		}
		s.failWithHints(w, sh, f, mock)
		return
	}
	if buildErr != nil {
		s.fail(w, sh, *buildErr)
		return
	}

	wt := waiter{s: s}
	defer wt.stop()
	lat, gen := s.timing(ans.output, adm.inFlight)
	if mock.latencySet {
		lat = mock.latency
	}
	if ans.events == nil {
		// A JSON answer comes once generated; a stream spreads the
		// generation over its chunks.
		lat += gen
	}
	switch wt.pause(ctx, lat) {
	case waitClientGone:
		s.stats.clientGone.Add(1)
		return
	case waitClosed:
		resetConn(w)
		return
	}

	switch f.kind {
	case faultStatus:
		release()
		s.failWithHints(w, sh, f, mock)
		return
	case faultReset:
		s.reset(w, release)
		return
	case faultOverloadMidStream:
		if ans.events == nil {
			// A JSON answer can say it only with a status.
			release()
			s.fail(w, sh, overloadError(sh))
			return
		}
	}
	if ans.idHeader != "" {
		w.Header().Set(ans.idHeader, ans.id)
	}
	if ans.events != nil {
		s.stream(ctx, w, &wt, ans, gen, f, release)
		return
	}
	s.writeJSONAnswer(ctx, w, ans.body, f, release)
}

// refuse answers a request the limits did not admit.
func (s *Server) refuse(w http.ResponseWriter, sh shape, adm admission, model string) {
	h := w.Header()
	switch {
	case adm.capFull:
		h.Set("Retry-After", "1")
		s.fail(w, sh, errCapacity())
	case adm.tooLarge:
		// Waiting cannot help: no retry hint.
		st := adm.budgets[adm.refusedBy]
		s.fail(w, sh, errTooManyTokens(adm.refusedBy, model, st, adm.requested))
	case adm.refusedBy != budgetNone:
		st := adm.budgets[adm.refusedBy]
		setRetryHints(h, st.next)
		s.fail(w, sh, errTokens(adm.refusedBy, model, st, adm.requested))
	default:
		setRetryHints(h, adm.next)
		s.fail(w, sh, errRate())
	}
}

// setRetryHints tells the client to wait d: retry-after-ms, and
// retry-after in whole seconds, at least 1.
func setRetryHints(h http.Header, d time.Duration) {
	h.Set("Retry-After-Ms", strconv.FormatInt(d.Milliseconds(), 10))
	h.Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10))
}

// failWithHints answers a status fault, with the retry hints of
// X-Mock-Retry-After and X-Mock-Retry-After-Ms where they apply.
func (s *Server) failWithHints(w http.ResponseWriter, sh shape, f fault, mock mockHeaders) {
	if f.retryHint() {
		if mock.retryAfter != "" {
			w.Header().Set("Retry-After", mock.retryAfter)
		}
		if mock.retryAfterMs != "" {
			w.Header().Set("Retry-After-Ms", mock.retryAfterMs)
		}
	}
	s.fail(w, sh, statusError(f.status, f.quota))
}

// setRateHeaders adds the token bucket's state in OpenAI's headers, and in
// Anthropic's on Anthropic routes.
func setRateHeaders(h http.Header, adm admission, sh shape, now time.Time) {
	if !adm.bucket {
		return
	}
	limit, remaining := strconv.Itoa(adm.limit), strconv.Itoa(adm.remaining)
	h.Set("X-Ratelimit-Limit-Requests", limit)
	h.Set("X-Ratelimit-Remaining-Requests", remaining)
	h.Set("X-Ratelimit-Reset-Requests", openAIDuration(adm.full))
	if sh == shapeAnthropic {
		h.Set("Anthropic-Ratelimit-Requests-Limit", limit)
		h.Set("Anthropic-Ratelimit-Requests-Remaining", remaining)
		reset := now.Add(adm.full)
		if t := reset.Truncate(time.Second); t.Before(reset) {
			reset = t.Add(time.Second)
		}
		h.Set("Anthropic-Ratelimit-Requests-Reset", reset.UTC().Format(time.RFC3339))
	}
}

// openAIDuration formats d as OpenAI's reset headers do: 1s, 250ms, 6m0s.
func openAIDuration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

func (s *Server) hasFaults() bool {
	f := s.cfg.Faults
	return f.Error500 > 0 || f.Overloaded529 > 0 || f.Reset > 0 || f.Hang > 0 || f.OverloadedMidStream > 0
}

// uniform returns a random number in [0, 1) without locking.
func (s *Server) uniform() float64 {
	return float64(splitmix64(s.rng.Add(golden))>>11) / (1 << 53)
}

// timing draws the time to an answer's first byte and the time to
// generate its output tokens, with inFlight requests in flight: Latency
// and output/OutputTokensPerSecond, both times one lognormal factor of
// sigma LatencySpread (median 1) and the knee's slowdown.
func (s *Server) timing(output, inFlight int) (first, gen time.Duration) {
	f := kneeSlowdown(s.cfg.Knee, inFlight)
	if s.cfg.LatencySpread > 0 && (s.cfg.Latency > 0 || s.cfg.OutputTokensPerSecond > 0) {
		u1, u2 := s.uniform(), s.uniform()
		z := math.Sqrt(-2*math.Log(1-u1)) * math.Cos(2*math.Pi*u2)
		f *= math.Exp(s.cfg.LatencySpread * z)
	}
	first = time.Duration(float64(s.cfg.Latency) * f)
	gen = time.Duration(float64(generation(output, s.cfg.OutputTokensPerSecond)) * f)
	return first, gen
}

// readBody reads the whole request body, up to maxBody.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > maxBody {
		e := errTooLarge()
		return nil, &e
	}
	rd := http.MaxBytesReader(w, r.Body, maxBody)
	var (
		b   []byte
		err error
	)
	if r.ContentLength > 0 {
		b = make([]byte, r.ContentLength)
		_, err = io.ReadFull(rd, b)
	} else {
		b, err = io.ReadAll(rd)
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			e := errTooLarge()
			return nil, &e
		}
		e := errInvalid("unreadable_body", "Could not read the request body: "+err.Error())
		return nil, &e
	}
	return b, nil
}
