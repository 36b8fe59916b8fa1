//go:build unix

package fdlimit

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flakyListener fails its first accepts with errs, then accepts.
type flakyListener struct {
	net.Listener
	errs []error
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, err
	}
	return l.Listener.Accept()
}

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

func TestListenerWaitsOutExhaustedDescriptors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var paused []error
	l := Listener(&flakyListener{Listener: ln, errs: []error{acceptErr(syscall.EMFILE), acceptErr(syscall.ENFILE)}},
		func(err error) { paused = append(paused, err) })
	defer l.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	got, err := l.Accept()
	require.NoError(t, err, "EMFILE and ENFILE are waited out")
	got.Close()
	assert.Len(t, paused, 1, "told once per shortage")
}

func TestListenerReturnsOtherErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	l := Listener(&flakyListener{Listener: ln, errs: []error{acceptErr(syscall.EINVAL)}}, nil)
	_, err = l.Accept()
	assert.ErrorIs(t, err, syscall.EINVAL)
}

func TestCloseEndsAPause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	errs := make([]error, 100)
	for i := range errs {
		errs[i] = acceptErr(syscall.EMFILE)
	}
	l := Listener(&flakyListener{Listener: ln, errs: errs}, nil)
	done := make(chan error, 1)
	paused := make(chan struct{})
	l.(*listener).onPause = func(error) { close(paused) }
	go func() { _, err := l.Accept(); done <- err }()
	<-paused
	require.NoError(t, l.Close())
	assert.ErrorIs(t, <-done, net.ErrClosed)
}

func TestExhausted(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		assert.True(t, Exhausted(acceptErr(errno)), errno.Error())
	}
	assert.False(t, Exhausted(acceptErr(syscall.ECONNABORTED)))
	assert.False(t, Exhausted(fmt.Errorf("other")))
}

func TestRaiseSetsTheSoftLimitToTheHardOne(t *testing.T) {
	n, err := Raise()
	require.NoError(t, err)
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	assert.Equal(t, lim.Max, lim.Cur)
	assert.Equal(t, uint64(lim.Cur), n)
}
