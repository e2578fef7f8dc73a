package conn

import (
	"encoding/binary"
	"fmt"
)

// Version is the wire protocol version. Peers with different versions refuse
// each other at connect time.
const Version = 13

// Default stream parameters: what a side proposes when nothing chose a
// window, such as a command that cannot read its locked-memory limit.
const (
	DefaultChunk = 1 << 20
	DefaultDepth = 4
)

// Limits on the stream parameters a peer may ask for.
const (
	MinChunk = 1
	MaxChunk = 64 << 20
	MinDepth = 3
	MaxDepth = 128
)

// ParamsLen is the encoded size of Params.
const ParamsLen = 16

var paramsMagic = [4]byte{'R', 'D', 'P', 'P'}

// paramsBusy is the flag bit of Params.Busy in byte 6 of the encoding.
const paramsBusy = 1

// Params are the stream parameters the two peers agree on when a transport
// connects: the sender proposes its own, the receiver answers with the
// result of Negotiate, and both sides size their buffers from that answer.
type Params struct {
	Version uint16 // wire protocol version
	Chunk   int    // data payload bytes per message
	Depth   int    // buffers per side; Credits() of them carry data at once
	// Busy is set in a receiver's refusal of a connect request while it
	// serves another stream (see Listener.SetBusy): the sender may retry.
	Busy bool
}

// NewParams returns Params for this protocol version.
func NewParams(chunk, depth int) Params {
	return Params{Version: Version, Chunk: chunk, Depth: depth}
}

// Credits returns how many data messages may be in flight: Depth-1, so
// that the sender fills one buffer while the others are on the wire.
func (p Params) Credits() int { return p.Depth - 1 }

// SpareRecvs is how many receive buffers a receiver posts beyond one per
// credit (the last ones of its layout), for the sender's control messages
// (authentication, chain, heartbeat, abort), which must get through even
// while every data buffer is full. The sender sends them under control
// credits (see ControlCredits): all but one spare for any control message,
// returned by the receiver as it re-posts each spare, and the last one for
// the abort, so that an abort is never stuck behind a heartbeat.
const SpareRecvs = 2

// ControlCredits is how many control messages other than the abort a
// sender may have in flight: the spares less the one kept for the abort.
const ControlCredits = SpareRecvs - 1

// Validate reports whether p is within the protocol's limits.
func (p Params) Validate() error {
	if p.Chunk < MinChunk || p.Chunk > MaxChunk {
		return fmt.Errorf("chunk size %d out of range [%d, %d]", p.Chunk, MinChunk, MaxChunk)
	}
	if p.Depth < MinDepth || p.Depth > MaxDepth {
		return fmt.Errorf("depth %d out of range [%d, %d]", p.Depth, MinDepth, MaxDepth)
	}
	return nil
}

// Negotiate returns the parameters a receiver configured with local accepts
// for a sender proposing remote: the smaller chunk and the smaller depth, so
// that neither side uses more memory than its own flags allow.
func Negotiate(local, remote Params) (Params, error) {
	if remote.Version != Version {
		return Params{}, &Error{Kind: KindSetup, Op: "negotiate",
			Err: fmt.Errorf("version mismatch: the peer speaks protocol version %d, this build speaks %d: use the same rdmapipe release on both hosts", remote.Version, Version)}
	}
	if err := remote.Validate(); err != nil {
		return Params{}, &Error{Kind: KindSetup, Op: "negotiate", Err: fmt.Errorf("peer proposed bad parameters: %w", err)}
	}
	return Params{Version: Version, Chunk: min(local.Chunk, remote.Chunk), Depth: min(local.Depth, remote.Depth)}, nil
}

// MarshalBinary encodes p in ParamsLen bytes (also used as RDMA CM private
// data): "RDPP", version u16, flags u8, zero u8, chunk u32, depth u32, all
// little-endian.
func (p Params) MarshalBinary() ([]byte, error) {
	b := make([]byte, ParamsLen)
	copy(b, paramsMagic[:])
	binary.LittleEndian.PutUint16(b[4:], p.Version)
	binary.LittleEndian.PutUint32(b[8:], uint32(p.Chunk))
	binary.LittleEndian.PutUint32(b[12:], uint32(p.Depth))
	if p.Busy {
		b[6] |= paramsBusy
	}
	return b, nil
}

// UnmarshalBinary decodes Params encoded by MarshalBinary.
func (p *Params) UnmarshalBinary(b []byte) error {
	if len(b) < ParamsLen || [4]byte(b[:4]) != paramsMagic {
		return fmt.Errorf("peer is not an rdmapipe endpoint (bad connection parameters)")
	}
	p.Version = binary.LittleEndian.Uint16(b[4:])
	p.Chunk = int(binary.LittleEndian.Uint32(b[8:]))
	p.Depth = int(binary.LittleEndian.Uint32(b[12:]))
	p.Busy = b[6]&paramsBusy != 0
	return nil
}

// TrailerLen is the length of the trailer the engine puts at the end of
// each of the sender's messages (its type and sequence number): a receive
// buffer holds a chunk and a trailer.
const TrailerLen = 8

// TagLen is the room a data message may take between its payload and
// its trailer: the tag of the payload, with a shared key. A buffer holds
// a chunk, a tag and a trailer.
const TagLen = 16

// Layout says how many buffers of which size one side of a connection needs.
type Layout struct {
	SendBufs, SendSize int
	RecvBufs, RecvSize int
}

// SenderLayout is the buffer layout of the sending side for p (a sender may
// size itself from its proposal, which is never smaller than the answer):
// Depth send buffers (one more than the credits, so that input is read
// into a buffer while the others are on the wire), and enough small receive
// buffers for every credit return and control message the receiver may
// have in flight.
func SenderLayout(p Params) Layout {
	return Layout{SendBufs: p.Depth, SendSize: max(p.Chunk+TagLen+TrailerLen, MaxControl),
		RecvBufs: p.Depth + controlSlack, RecvSize: MaxControl}
}

// ReceiverLayout is the buffer layout of the receiving side for negotiated
// p: one receive buffer per credit plus SpareRecvs for the sender's control
// messages; it sends only control messages. So the receiver pins
// Chunk x (Depth+1) and the sender Chunk x Depth (plus trailers), unless
// the transport gives the spares just MaxControl bytes (the RDMA write
// data path does). Buffers are never smaller than MaxControl, so that
// control messages fit even when the chunk is tiny.
func ReceiverLayout(p Params) Layout {
	return Layout{RecvBufs: p.Credits() + SpareRecvs, RecvSize: max(p.Chunk+TagLen+TrailerLen, MaxControl)}
}

// controlSlack is how many receive buffers a sender posts beyond one per
// credit. The receiver's messages are bounded by the protocol, not by the
// clock: at most Credits() credit returns (each returns at least one
// credit), ControlCredits control-credit returns (a credit message, or
// the host report that answers an ask for one), one of hello, welcome or
// done at a time, one lost message (the next waits for the sender to ask
// for it; the done may follow the last at once), and one abort; the slack
// covers all but the credit returns, with the buffer beyond the credits
// (Depth is one more) to spare.
const controlSlack = 4
