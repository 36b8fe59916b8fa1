package proxy

import "sync"

// callCount counts the calls of Do in progress, so that Shutdown waits for
// them as it waits for the calls of its clients. The zero value is ready
// to use and safe for concurrent use.
type callCount struct {
	mu   sync.Mutex
	n    int
	none chan struct{} // closed when n falls to 0; nil while n has stayed 0
}

func (c *callCount) add() {
	c.mu.Lock()
	if c.n == 0 {
		c.none = make(chan struct{})
	}
	c.n++
	c.mu.Unlock()
}

func (c *callCount) done() {
	c.mu.Lock()
	c.n--
	if c.n == 0 {
		close(c.none)
	}
	c.mu.Unlock()
}

// idle returns a channel closed once no call is in progress.
func (c *callCount) idle() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return c.none
}
