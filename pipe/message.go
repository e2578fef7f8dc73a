package pipe

import (
	"encoding/binary"
	"fmt"
)

// The wire format. Messages from the sender land in the receiver's chunk
// buffers and start with a HeaderLen-byte header: a type byte, three zero
// bytes and a little-endian sequence number. Messages from the receiver are
// control messages: a single byte is a credit return (its value is the number
// of credits, 0 being a heartbeat); longer ones start with a type byte.
//
//	sender -> receiver           receiver -> sender
//	'D' data: payload            1 byte: credits
//	'E' end: bytes u64, crc u32  'H' hello: flags, nonce[32]
//	'A' abort: kind, reason      'W' welcome: flags, mac[32]
//	'K' auth: flags, nonce, mac  'F' finished: bytes u64
//	'B' heartbeat: seq of last   'A' abort: kind, reason
//	    message sent
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
	endLen   = HeaderLen + 12
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
// abortMessage appended to its prefix).
func parseAbort(body []byte) (Kind, string) {
	if len(body) == 0 {
		return KindAborted, "no reason given"
	}
	return Kind(body[0]), string(body[1:])
}
