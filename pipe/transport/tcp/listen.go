package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// Listener accepts senders over TCP. It implements pipe.Listener.
type Listener struct {
	busy   atomic.Bool // see SetBusy
	ln     *net.TCPListener
	addr   string
	local  pipe.Params
	closed context.Context // ends when Close is called
	close  context.CancelFunc
}

var _ pipe.Listener = (*Listener)(nil)

// errNotSender marks a connection from something that is not an rdmapipe
// sender, which Accept skips.
var errNotSender = errors.New("not an rdmapipe sender")

// Listen listens on addr (host:port; an empty host means every address) for
// senders, with local as the receiver's own parameters. Errors are
// *pipe.Error values of kind KindSetup (KindUsage for bad parameters).
func Listen(ctx context.Context, addr string, local pipe.Params) (*Listener, error) {
	op := "listen on " + addr
	if err := local.Validate(); err != nil {
		return nil, &pipe.Error{Kind: pipe.KindUsage, Op: op, Err: err}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, &pipe.Error{Kind: pipe.KindSetup, Op: op, Err: err}
	}
	tl := ln.(*net.TCPListener)
	closed, cancel := context.WithCancel(context.Background())
	return &Listener{ln: tl, addr: tl.Addr().String(), local: local, closed: closed, close: cancel}, nil
}

// SetBusy says whether the receiver is serving a stream; while it is,
// connect requests are refused as busy (see pipe.Listener).
func (l *Listener) SetBusy(busy bool) { l.busy.Store(busy) }

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() string { return l.addr }

// Close stops listening and unblocks Accept, even in the middle of a
// handshake.
func (l *Listener) Close() error {
	l.close()
	return l.ln.Close()
}

// Accept waits for a sender, negotiates its parameters against the
// listener's and returns a receiver's Conn sized by pipe.ReceiverLayout.
//
// Connections from anything that is not an rdmapipe sender (it sends
// something else, or nothing within 10 seconds, or hangs up) are closed and
// skipped: Accept goes on waiting. A sender whose proposal the listener
// refuses (another protocol version) is told why, and Accept returns a
// *pipe.Error of kind KindSetup; the listener stays open, so the caller may
// Accept again. After Close, Accept returns an error wrapping
// pipe.ErrClosed; when ctx ends, one of kind KindAborted.
func (l *Listener) Accept(ctx context.Context) (pipe.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.closed, cancel)()
	for {
		c, err := l.next(ctx)
		switch {
		case err == nil:
			return c, nil
		case l.closed.Err() != nil:
			return nil, &pipe.Error{Kind: pipe.KindSetup, Op: "accept on " + l.addr, Err: pipe.ErrClosed}
		case !errors.Is(err, errNotSender):
			return nil, err
		}
	}
}

// next accepts one connection and answers its handshake.
func (l *Listener) next(ctx context.Context) (*Conn, error) {
	nc, err := l.accept(ctx)
	if err != nil {
		return nil, err
	}
	return l.handshake(ctx, nc)
}

// accept waits for a TCP connection or the end of ctx.
func (l *Listener) accept(ctx context.Context) (net.Conn, error) {
	op := "accept on " + l.addr
	interrupt := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = l.ln.SetDeadline(time.Unix(1, 0))
		close(interrupt)
	})
	nc, err := l.ln.Accept()
	if !stop() {
		<-interrupt
		_ = l.ln.SetDeadline(time.Time{})
		if nc != nil {
			_ = nc.Close()
		}
		return nil, interrupted(op, ctx.Err())
	}
	if err != nil {
		return nil, &pipe.Error{Kind: pipe.KindSetup, Op: op, Err: err}
	}
	return nc, nil
}

// handshake reads the sender's proposal from nc and answers it. It returns
// an error wrapping errNotSender for a peer that is not an rdmapipe sender.
func (l *Listener) handshake(ctx context.Context, nc net.Conn) (*Conn, error) {
	op := "accept from " + nc.RemoteAddr().String()
	end := guard(ctx, nc, handshakeTimeout)
	p, refused, err := l.answer(nc)
	if cerr := end(); cerr != nil {
		_ = nc.Close()
		return nil, interrupted(op, cerr)
	}
	if refused != nil || err != nil {
		_ = nc.Close()
	}
	switch {
	case refused != nil:
		return nil, &pipe.Error{Kind: pipe.KindSetup, Op: op, Err: refused}
	case err != nil:
		return nil, fmt.Errorf("%s: %w: %v", op, errNotSender, err)
	}
	return newConn(nc, pipe.ReceiverLayout(p), p, pipe.SenderLayout(p).RecvBufs), nil
}

// answer reads a proposal from nc, negotiates and writes the answer. It
// returns the negotiated parameters, or why the proposal was refused, or an
// I/O or decoding error.
func (l *Listener) answer(nc net.Conn) (p pipe.Params, refused, err error) {
	b := make([]byte, pipe.ParamsLen)
	if _, err := io.ReadFull(nc, b); err != nil {
		return p, nil, err
	}
	var proposal pipe.Params
	if err := proposal.UnmarshalBinary(b); err != nil {
		return p, nil, err
	}
	p, refused = pipe.Negotiate(l.local, proposal)
	// A refusal carries the listener's protocol version and no parameters.
	reply, _ := pipe.Params{Version: pipe.Version}.MarshalBinary()
	if refused == nil {
		reply, _ = p.MarshalBinary()
	}
	_, err = nc.Write(reply)
	return p, refused, err
}
