package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// A Call whose context ends while its attempt is in flight upstream is cut
// as the call of a client that leaves is: Do returns at once (not when the
// provider's answer is ready or the attempt times out), the provider sees
// its connection close, the lane's slot comes back, nothing is retried, the
// controller does not take the cut for a failure of the provider's, and the
// Call is FAILED with client_closed, saying why its context ended. Both
// while the provider holds back its answer and while Do reads a stream the
// provider has begun.
func TestCallCancelledInFlightCutsTheAttempt(t *testing.T) {
	errStopped := errors.New("stopped by the test")
	for _, tc := range []struct {
		name string
		// start starts a provider that answers the Call slowly: it
		// returns its URL, the Call's body and headers, whether the call
		// is in flight (set holds the proxy's metrics), and whether the
		// provider has seen its connection close.
		start      func(t *testing.T, set *metrics.Set) (url, body string, header map[string]string, inFlight, closed func() bool)
		cutError   string
		cutOutcome string // the attempt's outcome in governor_attempts_total
	}{
		{
			name: "answer held back",
			start: func(t *testing.T, _ *metrics.Set) (string, string, map[string]string, func() bool, func() bool) {
				mock, url := startMock(t, mockllm.Config{})
				// Hangs until Governor closes the connection; so would
				// every retry.
				header := map[string]string{mockllm.HeaderFault: "hang,hang,hang,hang", "X-Request-Id": "cut"}
				return url, `{"model":"gpt-test"}`, header,
					func() bool { return mock.Stats().Hangs == 1 },
					func() bool {
						st := mock.Stats()
						return st.ClientGone == 1 && st.InFlight == 0 && st.ByRequestID["cut"] == 1
					}
			},
			cutError:   "cut: " + errStopped.Error(),
			cutOutcome: "client_gone",
		},
		{
			name: "stream being read",
			start: func(t *testing.T, set *metrics.Set) (string, string, map[string]string, func() bool, func() bool) {
				gone := make(chan struct{}, 1)
				began := make(chan struct{})
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, "data: event 0\n\n")
					w.(http.Flusher).Flush()
					close(began)
					<-r.Context().Done() // never sends event 1
					gone <- struct{}{}
				}))
				t.Cleanup(up.Close)
				return up.URL, `{"model":"gpt-test","stream":true}`, nil,
					// The stream has begun: Do reads it inside the
					// attempt.
					func() bool {
						select {
						case <-began:
							return true
						default:
							return false
						}
					},
					func() bool {
						select {
						case <-gone:
							return true
						default:
							return false
						}
					}
			},
			cutError:   "cut: " + errStopped.Error(),
			cutOutcome: "client_gone",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSockets(t)
			checkLeaks(t)
			set := metrics.NewSet()
			url, body, header, inFlight, closed := tc.start(t, set)
			p, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, url), AttemptTimeout: time.Hour, Metrics: set}))
			c := client(t)

			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			done := make(chan Result, 1)
			go func() {
				done <- p.Do(ctx, &Call{Path: "/v1/chat/completions", Header: header, Body: []byte(body), MaxRetries: 3})
			}()
			require.Eventually(t, inFlight, 10*time.Second, 5*time.Millisecond, "the call is in flight")
			cancel(errStopped)

			var res Result
			select {
			case res = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Do did not return when its context ended")
			}
			require.NotNil(t, res.Err, "%+v", res)
			assert.Equal(t, statusClientClosed, res.Err.Status)
			assert.Equal(t, CodeClientClosed, res.Err.Code)
			assert.Equal(t, StatusFailed, res.Details.Status)
			assert.Equal(t, 1, res.Details.Attempts, "nothing retried")
			assert.Equal(t, []string{tc.cutError}, res.Details.Errors)
			assert.Zero(t, res.StatusCode)

			require.Eventually(t, closed, 10*time.Second, 5*time.Millisecond, "the provider saw its connection close")
			lanes := lanesOf(t, c, base)
			require.Len(t, lanes, 1)
			assert.Zero(t, lanes[0].InFlight, "the lane's slot came back")
			assert.Zero(t, lanes[0].Decreases, "the cut is no congestion signal")
			prom := promText(set)
			for outcome, want := range map[string]int{tc.cutOutcome: 1, "timeout": 0, "connection_error": 0, "server_error": 0} {
				assert.Contains(t, prom, fmt.Sprintf("governor_attempts_total{lane=%q,outcome=%q} %d\n", lanes[0].ID, outcome, want))
			}
			assert.NotRegexp(t, `governor_retries_total\{[^}]*\} [1-9]`, prom)
		})
	}
}

// A Call whose context ends while it waits in the queue never reaches the
// provider and reports that its caller cancelled it.
func TestCallCancelledInQueueIsNeverSent(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, url := newRecorder(t)
	p, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, url)}))
	c := client(t)
	held := make(chan Result, 1)
	go func() {
		held <- p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Header: map[string]string{"X-Request-Id": "block"}, Body: []byte(`{}`)})
	}()
	require.Equal(t, "block", <-rec.arrived)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result, 1)
	go func() {
		done <- p.Do(ctx, &Call{Path: "/v1/chat/completions", Header: map[string]string{"X-Request-Id": "queued"}, Body: []byte(`{}`)})
	}()
	waitQueued(t, c, base, 1)
	cancel()
	res := <-done
	require.NotNil(t, res.Err)
	assert.Equal(t, CodeClientClosed, res.Err.Code)
	assert.Equal(t, "cancelled by the caller", res.Err.Message)
	assert.Equal(t, StatusFailed, res.Details.Status)
	assert.Zero(t, res.Details.Attempts)

	close(rec.release)
	assert.Equal(t, http.StatusOK, (<-held).StatusCode)
	assert.Equal(t, []string{"block"}, rec.seen(), "the cancelled call was never sent")
}

// The watch of a Call follows the context Do was given and may cut the
// attempt before that context's end reaches the attempt's own context,
// derived from it: the cut's reason is the cause once it arrives, never a
// nil error (a batch item's detail would else be lost to a panic).
func TestCutOfACallWaitsForItsContextsCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errStopped := errors.New("stopped by the test")
		ctx, cancel := context.WithCancelCause(context.Background())
		var why error
		returned := false
		go func() {
			_, why = (&governedCall{}).cutError(ctx)
			returned = true
		}()
		synctest.Wait()
		assert.False(t, returned, "the reason is not known before the context ends")
		cancel(errStopped)
		synctest.Wait()
		assert.True(t, returned)
		assert.ErrorIs(t, why, errStopped)
	})
}

// A Call's OnAttempt hears of each attempt before it is sent, numbered
// from 1, as many times as the provider received the call.
func TestCallOnAttemptHearsEachSend(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, url := startMock(t, mockllm.Config{})
	p, _ := startProxy(t, fastRetries(Config{Upstream: mustURL(t, url)}))
	var heard []int
	res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"model":"gpt-test"}`), MaxRetries: 3,
		Header:    map[string]string{mockllm.HeaderFault: "500,500,ok", "X-Request-Id": "hook"},
		OnAttempt: func(n int) { heard = append(heard, n) }})
	require.Nil(t, res.Err)
	assert.Equal(t, StatusCompletedWithRetries, res.Details.Status)
	assert.Equal(t, []int{1, 2, 3}, heard)
	assert.Equal(t, int64(3), mock.Stats().ByRequestID["hook"])
}
