// Package auth is the engine's authentication with a shared key: the
// handshake's proofs over its transcript and the MAC of a stream's data.
//
// Authentication is an HMAC-SHA256 challenge-response over the handshake's
// transcript: the receiver's hello carries its nonce, the sender answers
// with its own nonce and a MAC over the transcript (see Transcript: every
// flag, both nonces, the negotiated parameters, the stream's identity, the
// receiver's place in the chain and the chain of receivers it names), and
// the receiver's welcome proves it holds the key too, over the same
// transcript. The key itself never crosses the wire, and an
// on-path rewriter who changes any of it (clears the chain flag, drops a
// chain message) fails the proofs.
//
// With a key, the stream is authenticated too: both sides derive a stream
// key from the key and the transcript, and from it one subkey per purpose
// (the payloads, the chained stream tag, the receiver's confirmation,
// its host reports).
// Every data message carries a tag of its payload, which the receiver
// checks before it writes a byte of it; the end of the stream carries the
// stream's tag, and the receiver's confirmation a MAC of its own over the
// bytes it wrote and the number of receivers that wrote them. A stream
// rewritten, reordered, truncated or replayed from another session fails
// to verify.
//
// A payload's tag is AES-256-GCM's, keyed per stream, with the message's
// index in the stream as its nonce (never reused under one key): GMAC over
// the payload as additional data, or, when the stream is encrypted, over
// the payload it encrypts in place, under a subkey of its own. Each
// message's tag depends on no other, so that every core can compute them
// (see package seal); the tags, with each message's sequence number and
// length, are chained in order by HMAC-SHA256 into the stream's tag, which
// binds their order and count.
package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"strings"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Domain-separation labels, so that no MAC can be replayed as another and
// no subkey serves two purposes. SenderProof and ReceiverProof say whose
// Proof a MAC is.
const (
	proofKeyLabel  = "rdmapipe v10 proof key"
	SenderProof    = "rdmapipe v4 sender proof"
	ReceiverProof  = "rdmapipe v4 receiver proof"
	streamKeyLabel = "rdmapipe v10 stream key"
	gmacKeyLabel   = "rdmapipe v4 payload MAC key"
	cipherKeyLabel = "rdmapipe v7 payload encryption key"
	tagKeyLabel    = "rdmapipe v4 stream tag key"
	doneKeyLabel   = "rdmapipe v4 confirmation key"
	endLabel       = "rdmapipe v4 end of stream"
	doneLabel      = "rdmapipe v8 stream written"
	reportKeyLabel = "rdmapipe v13 host report key"
)

// Sizes of the nonces and MACs in the handshake's messages.
const (
	NonceLen = 32
	MACLen   = 32 // HMAC-SHA256
)

// NewNonce returns a fresh random nonce.
func NewNonce() ([NonceLen]byte, error) {
	var n [NonceLen]byte
	_, err := rand.Read(n[:])
	return n, err
}

// MAC returns HMAC-SHA256 under key of the parts in order.
func MAC(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// Transcript returns the SHA-256 of what a handshake agreed on, as both
// sides saw it: the negotiated chunk and depth, the receiver's hello
// (flags and nonce), the sender's auth flags and nonce, the identity of
// the stream and the receiver's place in its chain that the sender claims
// (length-prefixed), and the chain of receivers it names (empty without
// one), length-prefixed.
func Transcript(info conn.Info, hello []byte, authFlags byte, senderNonce, stream []byte, place uint32, chain []string) []byte {
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:4], uint32(info.Chunk))
	binary.LittleEndian.PutUint32(b[4:], uint32(info.Depth))
	h.Write(b[:])
	h.Write(hello)
	h.Write([]byte{authFlags})
	h.Write(senderNonce)
	binary.LittleEndian.PutUint32(b[:4], uint32(len(stream)))
	binary.LittleEndian.PutUint32(b[4:], place)
	h.Write(b[:4])
	h.Write(stream)
	h.Write(b[4:])
	text := strings.Join(chain, "\n")
	binary.LittleEndian.PutUint32(b[:4], uint32(len(text)))
	h.Write(b[:4])
	h.Write([]byte(text))
	return h.Sum(nil)
}

// Proof returns the MAC with which a peer proves it holds key over
// transcript t and what it adds to it (the receiver: its window's
// description): label says which peer.
func Proof(key []byte, label string, t []byte, more ...[]byte) []byte {
	return MAC(MAC(key, []byte(proofKeyLabel)), append([][]byte{[]byte(label), t}, more...)...)
}

// ValidProof reports, in constant time, whether got is the expected proof.
func ValidProof(key []byte, label string, t, got []byte, more ...[]byte) bool {
	return hmac.Equal(Proof(key, label, t, more...), got)
}

// StreamKey derives the key of one stream from the shared key and the
// handshake's transcript, which holds both nonces.
func StreamKey(key, t []byte) []byte {
	return MAC(key, []byte(streamKeyLabel), t)
}

// StreamMAC authenticates the data of one stream in order. Each data
// message's payload has a tag of its own (see NewAEAD), which any core can
// compute; the StreamMAC chains those tags, in order, into the stream's.
type StreamMAC struct {
	doneKey    []byte
	reportKey  []byte
	payloadKey []byte
	h          hash.Hash    // chains the messages' tags
	rec        [8 + 16]byte // sequence number, length and tag of a message
}

// NewStreamMAC returns the MAC of the stream whose key is key (see
// StreamKey), with a subkey of it for each purpose: the payload key is
// for encryption when encrypt is set, for GMAC otherwise.
func NewStreamMAC(key []byte, encrypt bool) *StreamMAC {
	label := gmacKeyLabel
	if encrypt {
		label = cipherKeyLabel
	}
	return &StreamMAC{doneKey: MAC(key, []byte(doneKeyLabel)), reportKey: MAC(key, []byte(reportKeyLabel)), payloadKey: MAC(key, []byte(label)),
		h: hmac.New(sha256.New, MAC(key, []byte(tagKeyLabel)))}
}

// NewAEAD returns an AES-256-GCM under the stream's payload key, for one
// goroutine: a data message's tag is its Seal with the message's index as
// the nonce, over the payload as additional data (GMAC) or, encrypting,
// over the payload it encrypts.
func (m *StreamMAC) NewAEAD() cipher.AEAD {
	block, err := aes.NewCipher(m.payloadKey) // 32 bytes: AES-256
	if err != nil {
		panic(err) // the key is always an HMAC-SHA256 output
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return gcm
}

// Add chains the tag of data message seq, whose payload is n bytes long.
func (m *StreamMAC) Add(seq uint32, n int, tag []byte) {
	binary.LittleEndian.PutUint32(m.rec[:4], seq)
	binary.LittleEndian.PutUint32(m.rec[4:8], uint32(n))
	copy(m.rec[8:], tag)
	m.h.Write(m.rec[:])
}

// End returns the tag of the whole stream: every message added, then the
// end message's sequence number, byte count and checksum.
func (m *StreamMAC) End(seq uint32, bytes int64, sum uint64) []byte {
	var b [20]byte
	binary.LittleEndian.PutUint32(b[:4], seq)
	binary.LittleEndian.PutUint64(b[4:12], uint64(bytes))
	binary.LittleEndian.PutUint64(b[12:], sum)
	m.h.Write([]byte(endLabel))
	m.h.Write(b[:])
	return m.h.Sum(nil)
}

// Done returns the MAC of the receiver's confirmation that receivers
// receivers (it and those down its chain) wrote bytes bytes of the stream
// whose tag is tag, and that the receivers named in lost (the hosts down
// its chain that were given up, see pipe.SendConfig.Fallback) did not.
func (m *StreamMAC) Done(bytes int64, receivers uint32, tag, lost []byte) []byte {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(bytes))
	binary.LittleEndian.PutUint32(b[8:12], receivers)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(lost)))
	return MAC(m.doneKey, []byte(doneLabel), b[:], tag, lost)
}

// Report returns the MAC of a host report (see wire.MsgReport), body
// everything before it; it uses nothing that the stream's data change, so
// that any goroutine may call it.
func (m *StreamMAC) Report(body []byte) []byte {
	return MAC(m.reportKey, body)
}
