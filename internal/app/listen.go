package app

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// multiListener accepts senders on several listeners at once (RDMA and TCP
// on the same port, for --transport auto) and hands them out one by one.
type multiListener struct {
	ls      []pipe.Listener
	names   []string // the listeners' transports, for Addr
	conns   chan accepted
	stop    context.CancelFunc
	closing sync.Once
}

// accepted is one Accept result of one of the listeners.
type accepted struct {
	c   pipe.Conn
	err error
}

// newMultiListener starts accepting on every listener in ls; names are
// their transports' names.
func newMultiListener(ls []pipe.Listener, names []string) *multiListener {
	ctx, stop := context.WithCancel(context.Background())
	m := &multiListener{ls: ls, names: names, conns: make(chan accepted), stop: stop}
	for _, l := range ls {
		go m.serve(ctx, l)
	}
	return m
}

// serve accepts on l until ctx ends, handing each result to Accept.
func (m *multiListener) serve(ctx context.Context, l pipe.Listener) {
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
func (m *multiListener) Accept(ctx context.Context) (pipe.Conn, error) {
	select {
	case a := <-m.conns:
		return a.c, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// SetBusy passes the receiver's state on to every listener.
func (m *multiListener) SetBusy(busy bool) {
	for _, l := range m.ls {
		l.SetBusy(busy)
	}
}

// Addr returns the addresses of all the listeners.
func (m *multiListener) Addr() string {
	addrs := make([]string, len(m.ls))
	for i, l := range m.ls {
		addrs[i] = m.names[i] + " " + l.Addr()
	}
	return strings.Join(addrs, " and ")
}

// Close stops every listener.
func (m *multiListener) Close() error {
	var errs []error
	m.closing.Do(func() {
		m.stop()
		for _, l := range m.ls {
			errs = append(errs, l.Close())
		}
	})
	return errors.Join(errs...)
}
