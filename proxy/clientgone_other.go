//go:build !linux

package proxy

import "net"

// peerGone cannot peek portably; elsewhere a departed client is noticed
// only when a write to it fails.
func peerGone(net.Conn) bool { return false }

// peek cannot look at a socket portably: it reports nothing waiting and
// the peer there.
func peek(net.Conn) (waiting, gone bool) { return false, false }

// A peeker is peek for one connection.
type peeker struct{}

func newPeeker(net.Conn) *peeker { return nil }

func (*peeker) peek() (waiting, gone bool) { return false, false }
