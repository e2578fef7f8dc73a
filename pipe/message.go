package pipe

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// The wire format. Messages from the sender land in the receiver's chunk
// buffers and start with a HeaderLen-byte header: a type byte, three zero
// bytes and a little-endian sequence number. Messages from the receiver are
// control messages: a single byte is a credit return (its value is the number
// of credits, 0 being a heartbeat); longer ones start with a type byte.
//
//	sender -> receiver           receiver -> sender
//	'D' data: payload            1 byte: credits
//	'E' end: bytes u64, sum u64, 'H' hello: flags, nonce[32]
//	    [stream tag[32]]         'W' welcome: flags, mac[32]
//	'A' abort: kind, reason      'F' finished: bytes u64, [mac[32]]
//	'K' auth: flags, nonce, mac  'A' abort: kind, reason
//	'B' heartbeat: seq of last
//	    message sent
//
// The bracketed fields are there only with a shared key (see auth.go).
const HeaderLen = 8

// Message types.
const (
	msgData    byte = 'D'
	msgEnd     byte = 'E'
	msgAbort   byte = 'A'
	msgAuth    byte = 'K'
	msgBeat    byte = 'B'
	msgHello   byte = 'H'
	msgWelcome byte = 'W'
	msgDone    byte = 'F'
)

// Hello and auth flags.
const (
	flagKey byte = 1 // the side holds a shared key
)

const (
	nonceLen = 32
	macLen   = 32
	endLen   = HeaderLen + 16 // without the stream tag
	doneLen  = 1 + 8          // without the MAC
	authLen  = HeaderLen + 1 + nonceLen + macLen
)

// putHeader writes a sender message header into b.
func putHeader(b []byte, typ byte, seq uint32) {
	b[0], b[1], b[2], b[3] = typ, 0, 0, 0
	binary.LittleEndian.PutUint32(b[4:], seq)
}

// parseHeader returns the type and sequence number of a sender message.
func parseHeader(b []byte) (typ byte, seq uint32, err error) {
	if len(b) < HeaderLen {
		return 0, 0, fmt.Errorf("short message of %d bytes", len(b))
	}
	return b[0], binary.LittleEndian.Uint32(b[4:]), nil
}

// abortMessage appends to prefix (a sender header or the receiver's type
// byte) the body of an abort of kind k with a human-readable reason,
// truncated so that the whole message fits in MaxControl bytes.
func abortMessage(prefix []byte, k Kind, reason string) []byte {
	b := append(prefix, byte(k))
	if room := MaxControl - len(b); len(reason) > room {
		reason = reason[:room]
	}
	return append(b, reason...)
}

// parseAbort decodes the kind and reason of an abort message body (what
// abortMessage appended to its prefix). The reason is the peer's text,
// quoted so that no byte of it reaches a terminal raw.
func parseAbort(body []byte) (Kind, string) {
	if len(body) == 0 {
		return KindAborted, "no reason given"
	}
	body = body[:min(len(body), MaxControl)]
	return Kind(body[0]), strconv.Quote(string(body[1:]))
}

// peerKind is the kind of failure an abort of kind k from the peer means
// here. Before the handshake has authenticated the peer, an abort can only
// say that the connection was not set up (or the peer is busy, or refused
// the key); after it, the peer aborted the stream or found it damaged.
func peerKind(k Kind, authenticated bool) Kind {
	if !authenticated {
		switch k {
		case KindBusy, KindAuth:
			return k
		}
		return KindSetup
	}
	if k == KindIntegrity {
		return k
	}
	return KindAborted
}

// describe quotes the start of a message from the peer for an error.
func describe(msg []byte) string {
	const most = 16
	if len(msg) > most {
		return fmt.Sprintf("%q... (%d bytes)", msg[:most], len(msg))
	}
	return fmt.Sprintf("%q (%d bytes)", msg, len(msg))
}
