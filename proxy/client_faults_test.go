package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// A client that leaves while its call is in flight upstream cuts the
// attempt: the provider sees its connection close at once (not when its
// answer is ready or the attempt times out), the lane's one slot goes to the
// call queued behind, nothing is retried for the departed client, and the
// controller does not take the cut for a failure of the provider's. JSON
// and streamed calls alike: both wait for the provider's headers.
func TestClientLeavingInFlightCutsTheAttempt(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"json", `{"model":"gpt-test"}`},
		{"stream", `{"model":"gpt-test","stream":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSockets(t)
			checkLeaks(t)
			mock, mockURL := startMock(t, mockllm.Config{})
			set := metrics.NewSet()
			// One call at a time, and an attempt timeout far beyond the
			// test's: without the cut, the call queued behind would wait
			// an hour.
			_, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, mockURL), AttemptTimeout: time.Hour, Metrics: set}))
			c := client(t)

			ctx, cancel := context.WithCancel(context.Background())
			left := make(chan struct{})
			go func() {
				defer close(left)
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(tc.body))
				req.Header.Set("X-Request-Id", "leaver")
				// Hangs until Governor closes the connection; so would
				// every retry.
				req.Header.Set(mockllm.HeaderFault, "hang,hang,hang,hang,hang,hang,hang,hang,hang,hang,hang")
				_, err := c.Do(req)
				assert.Error(t, err)
			}()
			require.Eventually(t, func() bool { return mock.Stats().Hangs == 1 }, 10*time.Second, 5*time.Millisecond,
				"the call is in flight")

			next := make(chan int, 1)
			go func() {
				resp, body := chat(t, c, base, map[string]string{"X-Request-Id": "next"})
				assert.Equal(t, 200, resp.StatusCode, body)
				next <- resp.StatusCode
			}()
			waitQueued(t, c, base, 1)
			cancel()
			<-left

			select {
			case <-next:
			case <-time.After(20 * time.Second):
				t.Fatal("the call queued behind the departed client's never got the slot")
			}
			require.Eventually(t, func() bool {
				st := mock.Stats()
				return st.ClientGone == 1 && st.InFlight == 0
			}, 10*time.Second, 5*time.Millisecond, "the provider saw the departed client's request end")
			st := mock.Stats()
			assert.Equal(t, int64(1), st.ByRequestID["leaver"], "no retry for a client that has left")
			assert.Equal(t, int64(1), st.ByRequestID["next"])

			lanes := lanesOf(t, c, base)
			require.Len(t, lanes, 1)
			l := lanes[0]
			assert.Zero(t, l.InFlight)
			assert.Zero(t, l.Decreases, "the cut is no congestion signal")
			prom := promText(set)
			for outcome, want := range map[string]int{"client_gone": 1, "answered": 1, "timeout": 0, "connection_error": 0} {
				assert.Contains(t, prom, fmt.Sprintf("governor_attempts_total{lane=%q,outcome=%q} %d\n", l.ID, outcome, want))
			}
			assert.NotRegexp(t, `governor_retries_total\{[^}]*\} [1-9]`, prom)
		})
	}
}

// Clients that send their request a byte at a time (slowloris), headers or
// body, are cut off after ReadTimeout, never reach the provider, and do not
// slow anyone else down.
func TestSlowlorisClientsAreCutOff(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	rec, up := newRecorder(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), ReadTimeout: 500 * time.Millisecond}))
	addr := strings.TrimPrefix(base, "http://")

	const slow = 20
	type cut struct {
		answer string
		sent   int
	}
	cuts := make(chan cut, slow)
	for i := range slow {
		// Half of them trickle their headers, half their body.
		head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: slow\r\n"
		if i%2 == 1 {
			head += "Content-Length: 100000\r\n\r\n{"
		}
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = io.WriteString(conn, head)
		require.NoError(t, err)
		go func() {
			defer conn.Close()
			read := make(chan string, 1)
			go func() {
				b, _ := io.ReadAll(conn)
				read <- string(b)
			}()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			sent := 0
			for {
				select {
				case answer := <-read:
					cuts <- cut{answer, sent}
					return
				case <-tick.C:
					if _, err := io.WriteString(conn, "a"); err == nil {
						sent++
					}
				}
			}
		}()
	}

	// Meanwhile everyone else is served.
	c := client(t)
	for i := range 10 {
		resp, body := chat(t, c, base, map[string]string{"X-Request-Id": fmt.Sprintf("fast-%d", i)})
		assert.Equal(t, 200, resp.StatusCode, body)
	}
	for range slow {
		got := <-cuts
		if got.answer != "" {
			assert.True(t, strings.HasPrefix(got.answer, "HTTP/1.1 408 "), "a slow client gets 408 or a closed connection: %q", got.answer)
		}
	}
	assert.NotContains(t, rec.seen(), "slow", "no slow request reached the provider")
}

// dialSmallWindow dials addr with a tiny receive buffer, so that a client
// that does not read fills it after a few kilobytes.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	return conn
}

// A client that never reads its answer, buffered or streamed, holds
// neither its lane nor anyone else: its connection is given up after the
// stream idle timeout and the next call on the lane goes through.
func TestClientThatNeverReadsDoesNotHoldTheLane(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int    // bytes of the answer to the silent client
		ct   string // its Content-Type
	}{
		{"buffered answer", 16 * bufferResponseBytes, "application/json"},  // read whole by Governor, then written
		{"streamed answer", 16 * bufferResponseBytes, "text/event-stream"}, // passed through as it is read
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSockets(t)
			checkLeaks(t)
			big := strings.Repeat("x", tc.size)
			rec, up := newRecorder(t)
			rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) {
				w.Header().Set("Content-Type", "application/json")
				if r.Header.Get("X-Request-Id") == "silent" {
					w.Header().Set("Content-Type", tc.ct)
					w.Header().Set("Content-Length", fmt.Sprint(len(big)))
					io.WriteString(w, big)
					return
				}
				io.WriteString(w, `{"ok":true}`)
			}
			_, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, up), StreamIdleTimeout: 300 * time.Millisecond}))
			addr := strings.TrimPrefix(base, "http://")

			silent := dialSmallWindow(t, addr)
			defer silent.Close()
			_, err := io.WriteString(silent, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: silent\r\n"+
				"Connection: close\r\nContent-Length: 20\r\n\r\n{\"model\":\"gpt-test\"}")
			require.NoError(t, err)
			require.Equal(t, "silent", <-rec.arrived)

			// The lane's one slot (chat's model is the silent call's) comes
			// back although the silent client reads nothing.
			resp, body := chat(t, client(t), base, map[string]string{"X-Request-Id": "next"})
			assert.Equal(t, 200, resp.StatusCode, body)

			// The silent client's connection ends: read what was left for
			// it.
			require.NoError(t, silent.SetReadDeadline(time.Now().Add(30*time.Second)))
			got, err := io.Copy(io.Discard, bufio.NewReader(silent))
			require.NoError(t, err, "Governor closes the connection of a client that does not read")
			t.Logf("the silent client could still read %d of %d body bytes", got, tc.size)
		})
	}
}

// Clients that leave mid-stream, many at once, close their upstream streams
// and leave nothing behind; the clients that stay get whole streams.
func TestManyClientsLeavingMidStream(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{ChunkDelay: 20 * time.Millisecond, StreamChunks: 50})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL)}))
	c := client(t)
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			resp, err := c.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			if i%2 == 0 {
				_, err := bufio.NewReader(resp.Body).ReadString('\n')
				assert.NoError(t, err)
				return // leaves after the first event
			}
			b, err := io.ReadAll(resp.Body)
			assert.NoError(t, err)
			assert.True(t, strings.HasSuffix(string(b), "data: [DONE]\n\n"), "a client that stays gets the whole stream")
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		st := mock.Stats()
		return st.InFlight == 0 && st.StreamsAborted == n/2 && st.StreamsCompleted == n/2
	}, 10*time.Second, 10*time.Millisecond, "every stream of a client that left is closed at the provider")
}
