package pipe

import (
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
)

// TestParallelMin checks where each kind of stream starts handing a
// message's work to the pool: unkeyed XXH3 at 1 MiB, GMAC and AES-GCM at
// 128 KiB.
func TestParallelMin(t *testing.T) {
	key := make([]byte, 32)
	cases := []struct {
		name string
		st   *seal.Stream
		want int
	}{
		{"unkeyed", seal.New([]byte("id")), 1 << 20},
		{"keyed", seal.NewKeyed(key, false), 128 << 10},
		{"encrypted", seal.NewKeyed(key, true), 128 << 10},
	}
	for _, tc := range cases {
		if got := parallelMin(tc.st); got != tc.want {
			t.Errorf("%s: parallelMin %d, want %d", tc.name, got, tc.want)
		}
	}
}
