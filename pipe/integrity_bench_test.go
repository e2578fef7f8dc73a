package pipe

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash/crc32"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
)

// The cost of the stream's integrity checks per core, for docs/performance.md:
// go test -run '^$' -bench Integrity ./pipe (MB/s is per core; GB/cpu-s,
// see reportCPU, is the same per second of CPU time, which a busy machine
// leaves as it is).
func BenchmarkIntegrity(b *testing.B) {
	chunk := make([]byte, conn.DefaultChunk)
	b.Run("xxHash64 stream checksum", func(b *testing.B) {
		d := xxhash.New()
		b.SetBytes(int64(len(chunk)))
		cpu := cpuTime(b)
		for b.Loop() {
			_, _ = d.Write(chunk)
		}
		reportCPU(b, cpuTime(b)-cpu, int64(len(chunk)))
	})
	b.Run("CRC32C (the checksum it replaced)", func(b *testing.B) {
		table := crc32.MakeTable(crc32.Castagnoli)
		b.SetBytes(int64(len(chunk)))
		var sum uint32
		cpu := cpuTime(b)
		for b.Loop() {
			sum = crc32.Update(sum, table, chunk)
		}
		reportCPU(b, cpuTime(b)-cpu, int64(len(chunk)))
	})
	msg := make([]byte, len(chunk)+seal.TagLen)
	for _, tc := range []struct {
		name string
		st   *seal.Stream
	}{
		{"per-message XXH3 (unkeyed)", seal.New(nil)},
		{"per-message GMAC (keyed)", seal.NewKeyed(make([]byte, 32), false)},
		{"per-message AES-256-GCM (keyed, encrypted)", seal.NewKeyed(make([]byte, 32), true)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			w := tc.st.Worker()
			b.SetBytes(int64(len(chunk)))
			var i uint64
			cpu := cpuTime(b)
			for b.Loop() {
				i++
				w.Seal(i, msg, len(chunk))
			}
			reportCPU(b, cpuTime(b)-cpu, int64(len(chunk)))
		})
	}
}

// BenchmarkHMAC is the MAC the stream MAC replaced, for comparison.
func BenchmarkHMAC(b *testing.B) {
	chunk := make([]byte, conn.DefaultChunk)
	h := hmac.New(sha256.New, make([]byte, 32))
	b.SetBytes(int64(len(chunk)))
	cpu := cpuTime(b)
	for b.Loop() {
		h.Write(chunk)
	}
	reportCPU(b, cpuTime(b)-cpu, int64(len(chunk)))
}
