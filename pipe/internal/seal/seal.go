// Package seal is the per-message work of a stream's integrity, and its
// in-order combination into the end of the stream.
//
// Every data message gets a digest that depends on its payload alone, so
// that any core can compute it while others handle other messages (see
// package work): without a key its XXH3 (64 bits); with one, its AES-256-GCM tag
// (package auth), which the message carries after its payload and the
// receiver checks before it writes a byte, and, when the stream is
// encrypted, the payload is encrypted and decrypted in place on the way.
// The digests are then combined in stream order, each with its message's
// sequence number and length: without a key into an xxHash64 that starts
// with the stream's identity (both handshake nonces), so that the end of
// the stream binds every message's payload, order, length and count to
// this one stream; with a key into the stream MAC's chained tag.
package seal

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/zeebo/xxh3"
)

// TagLen is the length of the tag a keyed data message carries after its
// payload.
const TagLen = conn.TagLen

// Stream combines the digests of one stream's data messages in order.
type Stream struct {
	mac     *auth.StreamMAC // with a key
	sum     *xxhash.Digest  // without one
	encrypt bool
	rec     [16]byte
}

// New returns the combination of an unkeyed stream whose identity is id
// (the handshake's nonces).
func New(id []byte) *Stream {
	s := &Stream{sum: xxhash.New()}
	_, _ = s.sum.Write(id)
	return s
}

// NewKeyed returns the combination of a keyed stream whose key is
// streamKey (auth.StreamKey), encrypted if encrypt is set.
func NewKeyed(streamKey []byte, encrypt bool) *Stream {
	return &Stream{mac: auth.NewStreamMAC(streamKey, encrypt), encrypt: encrypt}
}

// Keyed reports whether the stream is authenticated with a key.
func (s *Stream) Keyed() bool { return s.mac != nil }

// Encrypted reports whether the stream's payloads are encrypted.
func (s *Stream) Encrypted() bool { return s.encrypt }

// Name says how the stream is protected: "xxh3", "aes-gmac" or
// "aes-256-gcm".
func (s *Stream) Name() string {
	switch {
	case s.encrypt:
		return "aes-256-gcm"
	case s.mac != nil:
		return "aes-gmac"
	}
	return "xxh3"
}

// Room is how many bytes a data message carries after its payload, before
// its trailer: the tag, with a key.
func (s *Stream) Room() int {
	if s.mac != nil {
		return TagLen
	}
	return 0
}

// Digest is what the work on one message yields.
type Digest struct {
	sum uint64
	tag [TagLen]byte
}

// Worker does the work on messages of the stream, one at a time: each
// goroutine that does it needs a Worker of its own.
type Worker struct {
	aead    cipher.AEAD
	encrypt bool
	nonce   [12]byte
	tag     [TagLen]byte
}

// Worker returns a new Worker for the stream.
func (s *Stream) Worker() *Worker {
	w := &Worker{encrypt: s.encrypt}
	if s.mac != nil {
		w.aead = s.mac.NewAEAD()
	}
	return w
}

// Seal does the sender's work on data message index (1 for the stream's
// first) whose payload is m[:n]: its digest; with a key, its tag, written
// to m[n:n+TagLen], the payload encrypted in place first if the stream
// is.
func (w *Worker) Seal(index uint64, m []byte, n int) Digest {
	if w.aead == nil {
		return Digest{sum: xxh3.Hash(m[:n])}
	}
	var d Digest
	w.setNonce(index)
	if w.encrypt {
		w.aead.Seal(m[:0], w.nonce[:], m[:n], nil)
	} else {
		w.aead.Seal(m[n:n], w.nonce[:], nil, m[:n])
	}
	copy(d.tag[:], m[n:n+TagLen])
	return d
}

// Open does the receiver's work on data message index whose payload is
// m[:n] (and its tag m[n:n+TagLen], with a key): its digest, and with a
// key whether the tag is the payload's, the payload decrypted in place if
// the stream is encrypted. A payload that fails is never decrypted (it
// may be cleared).
func (w *Worker) Open(index uint64, m []byte, n int) (Digest, bool) {
	if w.aead == nil {
		return Digest{sum: xxh3.Hash(m[:n])}, true
	}
	var d Digest
	copy(d.tag[:], m[n:n+TagLen])
	w.setNonce(index)
	if w.encrypt {
		_, err := w.aead.Open(m[:0], w.nonce[:], m[:n+TagLen], nil)
		return d, err == nil
	}
	w.aead.Seal(w.tag[:0], w.nonce[:], nil, m[:n])
	return d, subtle.ConstantTimeCompare(w.tag[:], d.tag[:]) == 1
}

func (w *Worker) setNonce(index uint64) {
	binary.LittleEndian.PutUint64(w.nonce[4:], index)
}

// Add combines the digest of data message seq, whose payload is n bytes
// long, in stream order.
func (s *Stream) Add(seq uint32, n int, d Digest) {
	if s.mac != nil {
		s.mac.Add(seq, n, d.tag[:])
		return
	}
	binary.LittleEndian.PutUint32(s.rec[:4], seq)
	binary.LittleEndian.PutUint32(s.rec[4:8], uint32(n))
	binary.LittleEndian.PutUint64(s.rec[8:], d.sum)
	_, _ = s.sum.Write(s.rec[:])
}

// End returns what the end of the stream carries, after every data
// message was added, for an end message with sequence number seq and a
// stream of bytes bytes: without a key the stream's checksum, and with
// one the stream's tag (and a checksum of 0).
func (s *Stream) End(seq uint32, bytes int64) (sum uint64, tag []byte) {
	if s.mac != nil {
		return 0, s.mac.End(seq, bytes, 0)
	}
	return s.sum.Sum64(), nil
}

// Done returns the MAC of a keyed stream's confirmation (see
// auth.StreamMAC.Done), nil without a key.
func (s *Stream) Done(bytes int64, receivers uint32, tag, lost []byte) []byte {
	if s.mac == nil {
		return nil
	}
	return s.mac.Done(bytes, receivers, tag, lost)
}

// Report returns the MAC of a keyed stream's host report (see
// auth.StreamMAC.Report), nil without a key.
func (s *Stream) Report(body []byte) []byte {
	if s.mac == nil {
		return nil
	}
	return s.mac.Report(body)
}
