package rdma

import (
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// heapConn is a conn.Conn whose receive buffers are Go heap memory.
type heapConn struct {
	conn.Conn
	bufs [][]byte
}

func (h heapConn) RecvBufs() int        { return len(h.bufs) }
func (h heapConn) RecvBuf(i int) []byte { return h.bufs[i] }

// claimingConn is a heapConn with a MappedRegions method that names
// regions.
type claimingConn struct {
	heapConn
	regions [][]byte
}

func (c claimingConn) MappedRegions() [][]byte { return c.regions }

// TestAdoptRefusesHeap checks that Adopt refuses, before it touches the
// device, a connection that does not say its buffers are mapped outside
// the Go heap: the relay then copies.
func TestAdoptRefusesHeap(t *testing.T) {
	heap := heapConn{bufs: [][]byte{make([]byte, 4096), make([]byte, 4096)}}
	tests := []struct {
		name string
		up   conn.Conn
	}{
		{"no MappedRegions method", heap},
		{"no regions", claimingConn{heap, nil}},
		{"a buffer outside the regions", claimingConn{heap, [][]byte{heap.bufs[0]}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Conn{}
			err := c.Adopt(tt.up)
			if err == nil || !strings.Contains(err.Error(), "Go heap") {
				t.Fatalf("Adopt = %v, want a refusal of Go heap memory", err)
			}
			if c.fwd.Load() != nil {
				t.Fatal("Adopt refused but adopted")
			}
		})
	}
}

// TestFailedPostNotCounted fills a ring sender's send queue with forwards
// until a post fails (the receiver's notification receives run out, so the
// writes wait on receiver-not-ready and none completes) and checks that
// only the posted ones count as written: a control message says how many
// writes went before it, and the receiver holds it until that many have
// arrived, so a write counted but never posted would hold it forever.
func TestFailedPostNotCounted(t *testing.T) {
	p := conn.NewParams(4096, 4)
	snd, _ := pair(t, p, p, DefaultOptions())
	_, up := pair(t, p, p, DefaultOptions())
	if snd.Info().DataPath != "write" {
		t.Skip("data travels as SENDs here (iWARP): no ring, no write count")
	}
	c := snd.(*Conn)
	if err := c.Adopt(up); err != nil {
		t.Fatal(err)
	}
	const most = 10000
	posted := 0
	var err error
	for ; posted < most && err == nil; posted++ {
		err = c.PostForward(0, 100)
	}
	if err == nil {
		t.Fatalf("%d forwards posted with none completed, and no post failed", most)
	}
	posted-- // the last one failed
	t.Logf("forward %d failed: %v", posted, err)
	if conn.KindOf(err) != conn.KindAborted || !strings.Contains(err.Error(), "ibv_post_send") {
		t.Errorf("failed forward: %v, want a KindAborted ibv_post_send error", err)
	}
	if got := c.posts.writes.Load(); got != uint64(posted) {
		t.Errorf("%d writes counted after %d posted and one failed", got, posted)
	}
}
