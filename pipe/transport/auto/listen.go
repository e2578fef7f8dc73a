package auto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
	"github.com/rdmapipe/rdmapipe/pipe/transport/tcp"
)

// Listen listens on addr with RDMA (when a device is present and addr
// belongs to one) and TCP at once, and returns a Listener that hands out
// senders from both. If RDMA cannot listen it says why once on notice
// (prefixed with name) and listens on TCP only. On iWARP, whose RDMA
// listener holds the TCP port of the same number, it says so and listens
// on RDMA only.
func Listen(ctx context.Context, addr string, local conn.Params, opt rdma.Options, notice io.Writer, name string) (conn.Listener, error) {
	// RDMA first: once TCP accepts, RDMA is up too, so a sender in auto mode
	// that retries never settles for TCP while RDMA is still starting.
	var rl *rdma.Listener
	err := rdma.Available()
	if err == nil {
		rl, err = rdma.Listen(ctx, addr, local, opt)
	}
	tl, terr := tcp.Listen(ctx, addr, local)
	if terr != nil && rl != nil && errors.Is(terr, syscall.EADDRINUSE) && rl.HoldsTCPPort() {
		fmt.Fprintf(notice, "%s: not listening on TCP: the iWARP listener holds TCP port %s itself; RDMA only\n", name, port(rl.Addr()))
		return rl, nil
	}
	if terr != nil {
		if rl != nil {
			rl.Close()
		}
		return nil, terr
	}
	if err != nil {
		fmt.Fprintf(notice, "%s: not listening on RDMA (%v); TCP only\n", name, err)
		return tl, nil
	}
	return newListener([]conn.Listener{rl, tl}, []string{"rdma", "tcp"}), nil
}

// Listener accepts senders on several listeners at once (RDMA and TCP
// on the same port) and hands them out one by one. It implements
// conn.Listener.
type Listener struct {
	ls      []conn.Listener
	names   []string // the listeners' transports, for Addr
	conns   chan accepted
	stop    context.CancelFunc
	closing sync.Once
}

// accepted is one Accept result of one of the listeners.
type accepted struct {
	c   conn.Conn
	err error
}

// newListener starts accepting on every listener in ls; names are
// their transports' names.
func newListener(ls []conn.Listener, names []string) *Listener {
	ctx, stop := context.WithCancel(context.Background())
	m := &Listener{ls: ls, names: names, conns: make(chan accepted), stop: stop}
	for _, l := range ls {
		go m.serve(ctx, l)
	}
	return m
}

// serve accepts on l until ctx ends, handing each result to Accept.
func (m *Listener) serve(ctx context.Context, l conn.Listener) {
	for {
		c, err := l.Accept(ctx)
		select {
		case m.conns <- accepted{c, err}:
		case <-ctx.Done():
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil && ctx.Err() != nil {
			return
		}
	}
}

// Accept returns the next sender to connect on any of the listeners.
func (m *Listener) Accept(ctx context.Context) (conn.Conn, error) {
	select {
	case a := <-m.conns:
		return a.c, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// SetBusy passes the receiver's state on to every listener.
func (m *Listener) SetBusy(busy bool) {
	for _, l := range m.ls {
		l.SetBusy(busy)
	}
}

// Addr returns the addresses of all the listeners.
func (m *Listener) Addr() string {
	addrs := make([]string, len(m.ls))
	for i, l := range m.ls {
		addrs[i] = m.names[i] + " " + l.Addr()
	}
	return strings.Join(addrs, " and ")
}

// Close stops every listener.
func (m *Listener) Close() error {
	var errs []error
	m.closing.Do(func() {
		m.stop()
		for _, l := range m.ls {
			errs = append(errs, l.Close())
		}
	})
	return errors.Join(errs...)
}

// port returns the port of a "host:port" address.
func port(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return p
}
