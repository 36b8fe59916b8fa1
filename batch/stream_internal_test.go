package batch

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deadlineConn is a client connection whose write deadlines are ignored.
type deadlineConn struct{ net.Conn }

func (deadlineConn) SetWriteDeadline(time.Time) error { return nil }

// A progress answer whose client reads slower than items finish holds at
// most maxPending bytes of lines (and one line more): the items that
// finish meanwhile wait for the client to read, not in memory, and stop
// waiting when the batch stops.
func TestProgressLinesWaitForASlowClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		ls := newLineStream(deadlineConn{}, time.Minute, ctx.Done(), cancel)
		line := bytes.Repeat([]byte("x"), 100<<10)
		for range maxPending/len(line) + 1 {
			ls.push(line) // room for these
		}
		var pushed atomic.Int32
		go func() {
			ls.push(line)
			pushed.Add(1)
			ls.push(line)
			pushed.Add(1)
		}()
		synctest.Wait()
		require.Zero(t, pushed.Load(), "a line beyond the bound waits for the client")

		buf := make([]byte, 120<<10)
		n, err := ls.Read(buf)
		require.NoError(t, err)
		require.Equal(t, len(buf), n)
		synctest.Wait()
		assert.Equal(t, int32(1), pushed.Load(), "the client read: one line more fits")

		cancel() // the batch stops (the client left)
		synctest.Wait()
		assert.Equal(t, int32(2), pushed.Load(), "a stopped batch's line waits no more")
		ls.mu.Lock()
		defer ls.mu.Unlock()
		assert.LessOrEqual(t, len(ls.pending), maxPending+len(line)+1)
	})
}
