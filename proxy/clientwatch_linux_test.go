package proxy

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tcpPair returns the two ends of a loopback TCP connection: the client's
// and the server's (the one a clientWatch watches).
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server, err = ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// One loop watches every client: the call of a client that disconnects
// ends with errClientLeft, the others go on, and the loop ends once nothing
// is watched (checkLeaks).
func TestClientWatchEndsTheCallsOfDepartedClients(t *testing.T) {
	checkLeaks(t)
	w := newClientWatch(10*time.Millisecond, time.Now) // never closed: its loop must end on its own

	leaver, leaverConn := tcpPair(t)
	stayer, stayerConn := tcpPair(t)
	leavingWatch := w.watch(leaverConn, nil)
	stayingWatch := w.watch(stayerConn, nil)
	leaving, _ := leavingWatch.context(context.Background())
	staying, _ := stayingWatch.context(context.Background())
	require.NoError(t, leaving.Err(), "both clients are there")
	require.NoError(t, staying.Err())

	// A pipelined request waiting to be read is a client still there.
	_, err := io.WriteString(stayer, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, leaver.Close())
	select {
	case <-leaving.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the departed client was not noticed")
	}
	assert.ErrorIs(t, context.Cause(leaving), errClientLeft)
	assert.NoError(t, staying.Err(), "the client that stays is not touched")

	w.unwatch(leavingWatch)
	w.unwatch(stayingWatch)
	assert.ErrorIs(t, context.Cause(staying), context.Canceled, "unwatch ends the context")
	assert.NotErrorIs(t, context.Cause(staying), errClientLeft)
}

// A client gone before the watch starts ends the context at once; after
// close, a watch only follows its parent.
func TestClientWatchAtOnceAndAfterClose(t *testing.T) {
	checkLeaks(t)
	w := newClientWatch(time.Hour, time.Now) // no periodic check in this test
	gone, goneConn := tcpPair(t)
	require.NoError(t, gone.Close())
	require.Eventually(t, func() bool { return peerGone(goneConn) }, 5*time.Second, time.Millisecond)
	wc := w.watch(goneConn, nil)
	ctx, _ := wc.context(context.Background())
	assert.ErrorIs(t, context.Cause(ctx), errClientLeft)
	w.unwatch(wc)

	w.close()
	_, conn := tcpPair(t)
	parent, cancel := context.WithCancel(context.Background())
	wc = w.watch(conn, nil)
	ctx, _ = wc.context(parent)
	assert.NoError(t, ctx.Err())
	cancel()
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	w.unwatch(wc)
}

// The loop acts for a call that has no context yet, its attempt in flight:
// the client leaving cuts the attempt's exchange upstream, and the context
// made afterwards (for a retry's wait) ends at once.
func TestClientWatchCutsTheAttemptOfADepartedClient(t *testing.T) {
	checkLeaks(t)
	w := newClientWatch(10*time.Millisecond, time.Now)
	defer w.close()
	leaver, leaverConn := tcpPair(t)
	wc := w.watch(leaverConn, nil)
	up := newTrackedConn(pipeQuiet(t), nil)
	up.own(wc)
	wc.mu.Lock()
	wc.up = up // as takeOff records it
	wc.mu.Unlock()
	read := make(chan error, 1)
	go func() {
		_, err := up.Read(make([]byte, 1))
		read <- err
	}()

	require.NoError(t, leaver.Close())
	select {
	case err := <-read:
		assert.Error(t, err, "the read waiting for the provider's answer")
	case <-time.After(5 * time.Second):
		t.Fatal("the attempt of the departed client was not cut")
	}
	assert.True(t, wc.land(), "the attempt was cut")
	ctx, _ := wc.context(context.Background())
	assert.ErrorIs(t, context.Cause(ctx), errClientLeft, "a retry's wait ends at once")
	w.unwatch(wc)
}
