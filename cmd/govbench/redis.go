package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgovernor/governor/internal/proc"
)

// redisServer is a running redis-server: the store S4's coordinated
// Governors share (GOVERNOR_REDIS_URL). It keeps nothing on disk, so a
// restart starts empty, as a Redis that lost its memory would.
type redisServer struct {
	*proc.Process
	addr string // 127.0.0.1:PORT
}

// url is the GOVERNOR_REDIS_URL of the server.
func (r *redisServer) url() string { return "redis://" + r.addr + "/0" }

// startRedis starts redis-server on addr ("" picks a free port) and waits
// until it answers PING.
func startRedis(ctx context.Context, w *workspace, name, addr string) (*redisServer, error) {
	if addr == "" {
		var err error
		if addr, err = proc.FreeAddr(); err != nil {
			return nil, err
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	dir := filepath.Join(w.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	args := []string{"--bind", host, "--port", port, "--dir", dir, "--save", "", "--appendonly", "no", "--protected-mode", "no"}
	p, err := startProcess(name, w.redisBin, args, nil, filepath.Join(w.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	r := &redisServer{Process: p, addr: addr}
	wctx, cancel := context.WithTimeout(ctx, proc.StartTimeout)
	defer cancel()
	for {
		if err = redisPing(wctx, addr); err == nil {
			return r, nil
		}
		if aerr := p.Alive(); aerr != nil {
			return nil, aerr
		}
		select {
		case <-wctx.Done():
			_ = p.Stop(stopTimeout)
			return nil, fmt.Errorf("%s did not answer PING within %v: %w", name, proc.StartTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// redisPing sends PING in RESP and expects +PONG.
func redisPing(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING: %q", strings.TrimSpace(line))
	}
	return nil
}
