package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Delayed starts a TCP proxy in front of the server that holds every byte
// for delay in each direction, as a Redis a round trip of 2·delay away (in
// another zone, or behind a slow network), and returns its host:port. The
// proxy and its connections are closed when the test ends.
func (s *Server) Delayed(t testing.TB, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, to: s.Addr(), delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return ln.Addr().String()
}

type delayProxy struct {
	ln    net.Listener
	to    string
	delay time.Duration
	wg    sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, u) {
			return
		}
		p.wg.Add(2)
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

// track records a connection pair to close at the end; false if the proxy
// is closed already (the pair is closed).
func (p *delayProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies src to dst, each read delivered delay after it was read.
func (p *delayProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer dst.Close()
		for c := range ch {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d) // the delay being simulated
			}
			if _, err := dst.Write(c.b); err != nil {
				for range ch {
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(p.delay)}
		}
		if err != nil {
			close(ch)
			<-done
			return
		}
	}
}

func (p *delayProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
