package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// DefaultDialHandshake is how long a dialer waits by default for the
// receiver's answer to its proposal.
const DefaultDialHandshake = 10 * time.Second

// maxQuoted is how many of a stranger's bytes an error message quotes.
const maxQuoted = 32

// Dialer connects senders over TCP. It implements conn.Dialer. Its zero
// value uses the defaults.
type Dialer struct {
	// HandshakeTimeout bounds the wait for the receiver's answer once the
	// TCP connection stands, so that a peer that is not an rdmapipe
	// receiver (which may never answer) is reported in time. Zero means
	// DefaultDialHandshake. The TCP connect itself is bounded by the
	// context only.
	HandshakeTimeout time.Duration
}

var _ conn.Dialer = Dialer{}

// Dial connects to the receiver listening on addr (host:port), proposes
// proposal and returns a sender's Conn sized by conn.SenderLayout(proposal)
// whose Info reports the parameters the receiver answered. Errors are
// *conn.Error values of kind KindSetup (KindUsage for a bad proposal,
// KindBusy when the receiver serves another stream, KindAborted when ctx
// ends).
func (d Dialer) Dial(ctx context.Context, addr string, proposal conn.Params) (conn.Conn, error) {
	c, err := d.dial(ctx, addr, proposal)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Dial is Dialer.Dial with the default Dialer, returning the *Conn.
func Dial(ctx context.Context, addr string, proposal conn.Params) (*Conn, error) {
	return Dialer{}.dial(ctx, addr, proposal)
}

// dial is Dial, returning the *Conn.
func (d Dialer) dial(ctx context.Context, addr string, proposal conn.Params) (*Conn, error) {
	op := "connect " + addr
	if err := proposal.Validate(); err != nil {
		return nil, &conn.Error{Kind: conn.KindUsage, Op: op, Err: err}
	}
	timeout := d.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultDialHandshake
	}
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, interrupted(op, ctx.Err())
		}
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: err}
	}
	end := guard(ctx, nc, timeout)
	p, err := propose(nc, proposal, timeout)
	if cerr := end(); cerr != nil {
		_ = nc.Close()
		return nil, interrupted(op, cerr)
	}
	if err != nil {
		_ = nc.Close()
		kind := conn.KindSetup
		if errors.Is(err, conn.ErrBusy) {
			kind = conn.KindBusy
		}
		return nil, &conn.Error{Kind: kind, Op: op, Err: err}
	}
	l := conn.SenderLayout(proposal)
	return newConn(nc, l, p, conn.ReceiverLayout(p).RecvBufs, l.RecvBufs)
}

// propose sends proposal over nc and returns the receiver's answer; timeout
// is the deadline already set on nc, for the error message.
func propose(nc net.Conn, proposal conn.Params, timeout time.Duration) (conn.Params, error) {
	b, _ := proposal.MarshalBinary()
	_, err := nc.Write(b)
	n := 0
	if err == nil {
		n, err = io.ReadFull(nc, b)
	}
	got := ""
	if n > 0 {
		got = fmt.Sprintf(" (it answered %s)", quote(b[:n]))
	}
	var ne net.Error
	switch {
	case err == nil:
		return parseReply(b, proposal)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return conn.Params{}, fmt.Errorf("the peer closed the connection without an rdmapipe handshake answer%s: is an rdmapipe receiver listening there?", got)
	case errors.As(err, &ne) && ne.Timeout():
		return conn.Params{}, fmt.Errorf("no rdmapipe handshake answer within %v%s: is an rdmapipe receiver listening there?", timeout, got)
	default:
		return conn.Params{}, fmt.Errorf("rdmapipe handshake: %w", err)
	}
}

// parseReply decodes the receiver's answer b (conn.ParamsLen bytes) to
// proposal. A busy receiver's answer gives conn.ErrBusy.
func parseReply(b []byte, proposal conn.Params) (conn.Params, error) {
	var reply conn.Params
	if len(b) != conn.ParamsLen || reply.UnmarshalBinary(b) != nil {
		return conn.Params{}, fmt.Errorf("the peer is not an rdmapipe receiver (it answered %s)", quote(b))
	}
	switch {
	case reply.Version != proposal.Version:
		return conn.Params{}, fmt.Errorf("version mismatch: the receiver speaks protocol version %d and this sender %d: use the same rdmapipe release on both hosts", reply.Version, proposal.Version)
	case reply.Busy:
		return conn.Params{}, conn.ErrBusy
	case reply.Validate() != nil || reply.Chunk > proposal.Chunk || reply.Depth > proposal.Depth:
		return conn.Params{}, fmt.Errorf("the receiver refused chunk %d, depth %d (it answered chunk %d, depth %d)", proposal.Chunk, proposal.Depth, reply.Chunk, reply.Depth)
	}
	return reply, nil
}

// quote returns b quoted with %q, cut to maxQuoted bytes.
func quote(b []byte) string {
	if len(b) > maxQuoted {
		return fmt.Sprintf("%q...", b[:maxQuoted])
	}
	return fmt.Sprintf("%q", b)
}
