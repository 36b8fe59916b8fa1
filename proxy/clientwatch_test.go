package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A watch cuts the exchange of its own attempt on an upstream connection,
// even when the cut lands before fasthttp sets the deadline for the answer,
// and never the next exchange on that connection, which may be another
// call's.
func TestCutEndsOnlyTheOwnersExchange(t *testing.T) {
	checkLeaks(t)
	ours, theirs := net.Pipe()
	defer theirs.Close()
	c := newTrackedConn(ours, nil)
	defer c.Close()
	w, other := &watchedClient{}, &watchedClient{}
	go func() {
		for {
			if _, err := theirs.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 1)
	read := func() error {
		_, err := c.Read(buf)
		return err
	}

	// An exchange owned by w, cut while its request is written: the
	// answer's deadline, set afterwards, does not undo the cut.
	require.NoError(t, c.SetWriteDeadline(time.Time{}))
	c.own(w)
	c.cut(w)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
	assert.ErrorIs(t, read(), errClientLeft, "the cut exchange")

	// The next exchange, of another call or of none that is watched: w's
	// watch, late, cuts nothing.
	require.NoError(t, c.SetWriteDeadline(time.Time{}))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
	c.cut(w)
	assert.NoError(t, read(), "an exchange nobody owns")
	c.own(other)
	c.cut(w)
	assert.NoError(t, read(), "an exchange another watch owns")

	// A cut while a read waits ends the read.
	quiet := newTrackedConn(pipeQuiet(t), nil)
	quiet.own(w)
	done := make(chan error, 1)
	go func() {
		_, err := quiet.Read(buf)
		done <- err
	}()
	quiet.cut(w)
	assert.Error(t, <-done, "a read waiting for an answer")
}

// pipeQuiet returns one end of a pipe whose other end sends nothing.
func pipeQuiet(t *testing.T) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a
}
