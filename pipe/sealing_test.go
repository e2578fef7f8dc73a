package pipe

import (
	"math"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/source"
)

// TestParallelMin checks where each kind of stream starts handing a
// message's work to the pool: unkeyed XXH3 at 1 MiB, GMAC and AES-GCM at
// 128 KiB.
func TestParallelMin(t *testing.T) {
	t.Parallel()
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

// infoConn is a connection that only describes itself.
type infoConn struct {
	conn.Conn
	copies bool
}

func (c infoConn) Info() conn.Info { return conn.Info{Copies: c.copies} }

// serialSource is a source that only says whether it reads serially.
type serialSource struct {
	source.Source
	serial bool
}

func (s serialSource) Serial() bool { return s.serial }

// TestInlineMin checks which messages the sender's reader seals and posts
// itself: every one of an unkeyed stream it reads itself over a
// connection that copies what it sends (TCP), else those below parallelMin.
func TestInlineMin(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	cases := []struct {
		name     string
		st       *seal.Stream
		serial   bool
		copies   bool
		forwards bool
		want     int
	}{
		{"unkeyed pipe over tcp", seal.New([]byte("id")), true, true, false, math.MaxInt},
		{"unkeyed file over tcp", seal.New([]byte("id")), false, true, false, 1 << 20},
		{"unkeyed pipe over rdma", seal.New([]byte("id")), true, false, false, 1 << 20},
		{"unkeyed zero-copy relay over tcp", seal.New([]byte("id")), true, true, true, 1 << 20},
		{"keyed pipe over tcp", seal.NewKeyed(key, false), true, true, false, 128 << 10},
		{"encrypted pipe over tcp", seal.NewKeyed(key, true), true, true, false, 128 << 10},
	}
	for _, tc := range cases {
		s := newSender(infoConn{copies: tc.copies}, streamConfig{}, timeouts{}, "receiver")
		s.seal = tc.st
		if tc.forwards {
			s.fwd = &forwarding{}
		}
		if got := s.inlineMin(serialSource{serial: tc.serial}); got != tc.want {
			t.Errorf("%s: inlineMin %d, want %d", tc.name, got, tc.want)
		}
	}
}
