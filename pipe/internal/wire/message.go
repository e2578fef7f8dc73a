// Package wire is the encoding of the engine's messages: the trailer of
// the sender's messages, the message types and flags, aborts, the chain
// of receivers, and the decoding of what a peer sends, which is hostile
// until the handshake has authenticated it: bounded and quoted here.
//
// Messages from the sender land in the receiver's chunk
// buffers and end with a conn.TrailerLen-byte trailer: a type byte, three zero
// bytes and a little-endian sequence number. The payload comes first, so
// that it starts where the buffer starts: page-aligned, ready for pwrite,
// O_DIRECT and a remote write into the receiver's ring. Messages from the
// receiver are control messages: a single byte returns credits (its low
// seven bits the number of data credits, CtrlReturn one control credit);
// longer ones start with a type byte.
//
// Every message is flow-controlled. Data and end messages go under data
// credits, one per receive buffer the receiver posted for them; the
// sender's other messages under control credits, one per spare (see
// conn.SpareRecvs): the receiver returns a control credit whenever it
// re-posts a spare, which is how a heartbeat is answered, and the last
// spare is the abort's. The receiver's messages need no credits: the
// protocol bounds them (see conn.SenderLayout).
//
//	sender -> receiver (body, trailer)  receiver -> sender
//	'D' data: payload, [tag[16]]        1 byte: credits
//	'E' end: bytes u64, sum u64,        'H' hello: flags, nonce[32]
//	    [stream tag[32]]                'W' welcome: flags, mac[32],
//	                                        window (see conn.Window)
//	'A' abort: kind, reason             'F' finished: bytes u64,
//	                                        receivers u32, [mac[32]]
//	'K' auth: flags, nonce[32],         'A' abort: kind, reason
//	    stream[16], place u32, mac[32]
//	'C' chain: more u8, hosts           'L' lost: more u8, hosts
//	'B' heartbeat: (no body), its
//	    seq is the last message's
//	'N' more lost: (no body)
//	'Q' ask for a host report:          'R' host report (see
//	    (no body), seq the ask's            MsgReport)
//
// Every auth names the stream, by an identity its first sender chose at
// random, and the place in the chain of the receiver it is sent to (the
// first receiver's is 1, the one after it 2, ...): a relay passes the
// identity on, with its own place plus one. A receiver keeps both from
// its first handshake, and takes a rejoin only with the same two; the
// transcript (see auth.Transcript) binds them.
//
// A sender that takes over a stream from a receiver's lost upstream (see
// pipe.SendConfig.Fallback and Rejoin) sets FlagRejoin in its auth, and the
// receiver's welcome then carries, after its flags, how many bytes it has
// written (u64), under its key proof; the stream goes on from there with
// sequence numbers from 1 and byte counts of the whole stream. A sender
// naming a chain sets FlagRepair to have its relays repair it too, and
// the last relay sets it alone to the last receiver. Before
// its confirmation a receiver names the hosts down its chain that were
// given up in lost messages, one at a time: each waits for the sender's
// more-lost message (under a control credit), and the confirmation's MAC
// covers them all.
//
// The bracketed fields are there only with a shared key (see packages auth
// and seal): a data message's tag sits between its payload and its trailer
// (conn.TagLen), and an encrypted stream's payloads are ciphertext. Without
// a key the end message's sum is the stream's checksum (package seal);
// with one it is 0, and the stream tag stands for it.
package wire

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
)

// Message types.
const (
	MsgData     byte = 'D'
	MsgEnd      byte = 'E'
	MsgAbort    byte = 'A'
	MsgAuth     byte = 'K'
	MsgBeat     byte = 'B'
	MsgHello    byte = 'H'
	MsgWelcome  byte = 'W'
	MsgDone     byte = 'F'
	MsgChain    byte = 'C'
	MsgLost     byte = 'L'
	MsgMoreLost byte = 'N' // asks for the next lost message
)

// CtrlReturn, in a single-byte message from the receiver, returns one
// control credit.
const CtrlReturn byte = 0x80

// Hello and auth flags.
const (
	FlagKey   byte = 1 // the side holds a shared key
	FlagProbe byte = 2 // auth: the sender only checks the connection (pipe.Probe)
	FlagChain byte = 4 // auth: chain messages follow (pipe.SendConfig.Chain)
	// FlagEncrypt, in the auth message, says the sender encrypts the
	// stream (pipe.SendConfig.Encrypt); only with FlagKey.
	FlagEncrypt byte = 8
	// FlagRejoin, in the auth message, says the sender takes over a
	// stream the receiver has begun (pipe.ReceiveConfig.Rejoin); only with
	// FlagKey.
	FlagRejoin byte = 16
	// FlagRepair, in the auth message, asks the receivers of the chain
	// it names to repair it (pipe.SendConfig.Repair); only with FlagKey.
	// Without FlagChain (from the relay before a repaired chain's last
	// receiver) it says that the sender goes on without the receiver.
	FlagRepair byte = 32
)

// The stream's identity and a receiver's place in its chain, as an auth
// message carries them.
const (
	StreamIDLen = 16
	PlaceLen    = 4
	// MaxPlace bounds the place a receiver takes from its sender.
	MaxPlace = 1 << 20
)

// Sizes of message bodies, and where an auth message's fields start.
const (
	EndBody   = 16 // bytes u64, sum u64; without the stream tag
	DoneLen   = 1 + 8 + 4
	AuthNonce = 1
	AuthID    = AuthNonce + auth.NonceLen
	AuthPlace = AuthID + StreamIDLen
	AuthMAC   = AuthPlace + PlaceLen
	AuthBody  = AuthMAC + auth.MACLen
	// WrittenLen is the written count in a rejoin's welcome.
	WrittenLen = 8
	// LostPiece is how many bytes of the lost hosts' names one lost
	// message carries at most.
	LostPiece = conn.MaxControl - 2
	// MaxLost bounds the names of the lost hosts a confirmation carries.
	MaxLost = MaxChainHosts * (MaxChainHost + 1)
)

// PutTrailer writes a sender message trailer into b[:conn.TrailerLen].
func PutTrailer(b []byte, typ byte, seq uint32) {
	b[0], b[1], b[2], b[3] = typ, 0, 0, 0
	binary.LittleEndian.PutUint32(b[4:], seq)
}

// AppendTrailer appends a sender message trailer to body.
func AppendTrailer(body []byte, typ byte, seq uint32) []byte {
	b := append(body, make([]byte, conn.TrailerLen)...)
	PutTrailer(b[len(body):], typ, seq)
	return b
}

// ParseTrailer splits a sender message into its body, type and sequence
// number.
func ParseTrailer(b []byte) (body []byte, typ byte, seq uint32, err error) {
	if len(b) < conn.TrailerLen {
		return nil, 0, 0, fmt.Errorf("short message of %d bytes", len(b))
	}
	t := b[len(b)-conn.TrailerLen:]
	return b[:len(b)-conn.TrailerLen], t[0], binary.LittleEndian.Uint32(t[4:]), nil
}

// AbortMessage appends to prefix (the receiver's type byte, or nothing for
// the sender, whose trailer follows) the body of an abort of kind k with a
// human-readable reason, truncated so that the whole message, with room
// bytes after it, fits in MaxControl bytes.
func AbortMessage(prefix []byte, k conn.Kind, reason string, room int) []byte {
	b := append(prefix, byte(k))
	if left := conn.MaxControl - room - len(b); len(reason) > left {
		reason = reason[:left]
	}
	return append(b, reason...)
}

// ParseAbort decodes the kind and reason of an abort message body (what
// AbortMessage appended to its prefix). The reason is the peer's text,
// quoted so that no byte of it reaches a terminal raw.
func ParseAbort(body []byte) (conn.Kind, string) {
	if len(body) == 0 {
		return conn.KindAborted, "no reason given"
	}
	body = body[:min(len(body), conn.MaxControl)]
	return conn.Kind(body[0]), strconv.Quote(string(body[1:]))
}

// PeerKind is the kind of failure an abort of kind k from the peer means
// here. Before the handshake has authenticated the peer, an abort can only
// say that the connection was not set up (or the peer is busy, or refused
// the key); after it, the peer aborted the stream or found it damaged.
func PeerKind(k conn.Kind, authenticated bool) conn.Kind {
	if !authenticated {
		switch k {
		case conn.KindBusy, conn.KindAuth:
			return k
		}
		return conn.KindSetup
	}
	if k == conn.KindIntegrity {
		return k
	}
	return conn.KindAborted
}

// Describe quotes the start of a message from the peer for an error.
func Describe(msg []byte) string {
	const most = 16
	if len(msg) > most {
		return fmt.Sprintf("%q... (%d bytes)", msg[:most], len(msg))
	}
	return fmt.Sprintf("%q (%d bytes)", msg, len(msg))
}
