package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// Dialer connects senders over TCP. It implements pipe.Dialer.
type Dialer struct{}

var _ pipe.Dialer = Dialer{}

// Dial is the function Dial as a pipe.Dialer method.
func (Dialer) Dial(ctx context.Context, addr string, proposal pipe.Params) (pipe.Conn, error) {
	c, err := Dial(ctx, addr, proposal)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Dial connects to the receiver listening on addr (host:port), proposes
// proposal and returns a sender's Conn sized by pipe.SenderLayout(proposal)
// whose Info reports the parameters the receiver answered. Errors are
// *pipe.Error values of kind KindSetup (KindUsage for a bad proposal,
// KindAborted when ctx ends).
func Dial(ctx context.Context, addr string, proposal pipe.Params) (*Conn, error) {
	op := "connect " + addr
	if err := proposal.Validate(); err != nil {
		return nil, &pipe.Error{Kind: pipe.KindUsage, Op: op, Err: err}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, interrupted(op, ctx.Err())
		}
		return nil, &pipe.Error{Kind: pipe.KindSetup, Op: op, Err: err}
	}
	end := guard(ctx, nc, 2*handshakeTimeout)
	p, err := propose(nc, proposal)
	if cerr := end(); cerr != nil {
		_ = nc.Close()
		return nil, interrupted(op, cerr)
	}
	if err != nil {
		_ = nc.Close()
		return nil, &pipe.Error{Kind: pipe.KindSetup, Op: op, Err: err}
	}
	return newConn(nc, pipe.SenderLayout(proposal), p, pipe.ReceiverLayout(p).RecvBufs), nil
}

// propose sends proposal over nc and returns the receiver's answer.
func propose(nc net.Conn, proposal pipe.Params) (pipe.Params, error) {
	b, _ := proposal.MarshalBinary()
	_, err := nc.Write(b)
	if err == nil {
		_, err = io.ReadFull(nc, b)
	}
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return pipe.Params{}, errors.New("the peer hung up during the handshake: is it an rdmapipe receiver?")
	case errors.As(err, &ne) && ne.Timeout():
		return pipe.Params{}, fmt.Errorf("no handshake answer within %v: is the peer an rdmapipe receiver?", 2*handshakeTimeout)
	case err != nil:
		return pipe.Params{}, err
	}
	var reply pipe.Params
	if err := reply.UnmarshalBinary(b); err != nil {
		return pipe.Params{}, err
	}
	switch {
	case reply.Version != proposal.Version:
		return pipe.Params{}, fmt.Errorf("the receiver speaks protocol version %d and this sender %d: use the same rdmapipe release on both hosts", reply.Version, proposal.Version)
	case reply.Validate() != nil || reply.Chunk > proposal.Chunk || reply.Depth > proposal.Depth:
		return pipe.Params{}, fmt.Errorf("the receiver refused chunk %d, depth %d (it answered chunk %d, depth %d)", proposal.Chunk, proposal.Depth, reply.Chunk, reply.Depth)
	}
	return reply, nil
}
