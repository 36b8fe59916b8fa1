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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// A client that leaves while its call is in flight upstream: the attempt
// runs to its end, nothing is retried on the departed client's behalf, the
// lane's slot comes back, and the next client's call goes through.
func TestClientLeavingInFlightIsNotRetried(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{})
	// One call at a time, and an attempt timeout well above the interval
	// at which a waiting call checks its client (clientCheckInterval).
	_, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, mockURL), AttemptTimeout: time.Second}))
	c := client(t)

	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan struct{})
	go func() {
		defer close(left)
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-test"}`))
		req.Header.Set("X-Request-Id", "leaver")
		req.Header.Set(mockllm.HeaderFault, "hang,hang,hang,hang,hang,hang,hang,hang,hang,hang,hang")
		_, err := c.Do(req)
		assert.Error(t, err)
	}()
	require.Eventually(t, func() bool { return mock.Stats().Hangs == 1 }, 10*time.Second, 5*time.Millisecond,
		"the call is in flight")
	cancel()
	<-left

	// The next call on the lane waits for the slot the leaver held, then
	// goes through.
	resp, body := chat(t, c, base, map[string]string{"X-Request-Id": "next"})
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.Equal(t, int64(1), mock.Stats().ByRequestID["leaver"], "no retry for a client that has left")
	assert.Equal(t, int64(1), mock.Stats().ByRequestID["next"])
	for _, l := range lanesOf(t, c, base) {
		assert.Zero(t, l.InFlight, l.ID)
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
		size int // bytes of the answer to the silent client
	}{
		{"buffered answer", bufferResponseBytes},      // read whole by Governor, then written
		{"streamed answer", 16 * bufferResponseBytes}, // passed through as it is read
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSockets(t)
			checkLeaks(t)
			big := strings.Repeat("x", tc.size)
			rec, up := newRecorder(t)
			rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) {
				w.Header().Set("Content-Type", "application/json")
				if r.Header.Get("X-Request-Id") == "silent" {
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
