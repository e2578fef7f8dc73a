// Package transport makes the dialer or listener of a transport named as
// the commands' --transport names it: "tcp", "rdma", or "auto" (RDMA where
// a device can reach the peer, else TCP), from one Config, so that every
// command and role picks a transport the same way.
package transport

import (
	"context"
	"io"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/auto"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
	"github.com/rdmapipe/rdmapipe/pipe/transport/tcp"
)

// Config is a transport by name and its options. Its zero value is auto
// with the transports' defaults, saying nothing.
type Config struct {
	Name string // "tcp", "rdma", or "auto" ("" too)
	RDMA rdma.Options
	// HandshakeTimeout bounds a TCP dialer's handshake (0: tcp.Dialer's
	// default).
	HandshakeTimeout time.Duration
	// Notice, if not nil, is where auto says that it took one transport
	// only and why, prefixed with Who (the command's name).
	Notice io.Writer
	Who    string
}

// Dialer returns c's dialer. The rdma one fails with conn.KindNoRDMA on a
// host without RDMA.
func (c Config) Dialer() conn.Dialer {
	t := tcp.Dialer{HandshakeTimeout: c.HandshakeTimeout}
	switch c.Name {
	case "tcp":
		return t
	case "rdma":
		return rdmaDialer{rdma.Dialer{Options: c.RDMA}}
	}
	return &auto.Dialer{RDMA: c.RDMA, TCP: t, Notice: c.Notice, Name: c.Who}
}

// Pins returns how many bytes one side of a stream with c's transport, a
// receiver's if receiver, locks for a window of chunk x depth: what the
// RDMA transport registers (rdma.Options.Pinned), or nil for TCP, whose
// buffers are not locked.
func (c Config) Pins(receiver bool) func(chunk, depth int) uint64 {
	if c.Name == "tcp" {
		return nil
	}
	return func(chunk, depth int) uint64 {
		return uint64(c.RDMA.Pinned(conn.NewParams(chunk, depth), receiver))
	}
}

// rdmaDialer is the rdma transport's dialer, failing with kind
// conn.KindNoRDMA on a host without RDMA.
type rdmaDialer struct{ rdma.Dialer }

func (d rdmaDialer) Dial(ctx context.Context, addr string, proposal conn.Params) (conn.Conn, error) {
	if err := rdma.Available(); err != nil {
		return nil, err
	}
	return d.Dialer.Dial(ctx, addr, proposal)
}

// Listen listens on addr with c's transport, proposing p; auto listens on
// RDMA (where a device is present) and TCP at once. On error the listener
// is nil, not an interface holding a nil pointer.
func (c Config) Listen(ctx context.Context, addr string, p conn.Params) (conn.Listener, error) {
	switch c.Name {
	case "tcp":
		return listener(tcp.Listen(ctx, addr, p))
	case "rdma":
		if err := rdma.Available(); err != nil {
			return nil, err
		}
		return listener(rdma.Listen(ctx, addr, p, c.RDMA))
	}
	notice := c.Notice
	if notice == nil {
		notice = io.Discard
	}
	return auto.Listen(ctx, addr, p, c.RDMA, notice, c.Who)
}

// listener returns l as a conn.Listener, or a nil one on error.
func listener[L conn.Listener](l L, err error) (conn.Listener, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}
