package pipe

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash/crc32"
	"testing"
)

// The cost of the stream's integrity checks per core, for the README:
// go test -run '^$' -bench Integrity ./pipe (MB/s is per core).
func BenchmarkIntegrity(b *testing.B) {
	chunk := make([]byte, DefaultChunk)
	b.Run("CRC32C", func(b *testing.B) {
		b.SetBytes(int64(len(chunk)))
		var sum uint32
		for b.Loop() {
			sum = crc32.Update(sum, castagnoli, chunk)
		}
	})
	b.Run("GMAC stream MAC (keyed mode)", func(b *testing.B) {
		m := newStreamMAC(make([]byte, 32))
		b.SetBytes(int64(len(chunk)))
		var seq uint32
		for b.Loop() {
			seq++
			m.add(seq, chunk)
		}
	})
}

// BenchmarkHMAC is the MAC the stream MAC replaced, for comparison.
func BenchmarkHMAC(b *testing.B) {
	chunk := make([]byte, DefaultChunk)
	h := hmac.New(sha256.New, make([]byte, 32))
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		h.Write(chunk)
	}
}
