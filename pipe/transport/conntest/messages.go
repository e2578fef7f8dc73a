package conntest

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// testNegotiate checks the negotiated parameters and the buffer layouts.
func testNegotiate(t *testing.T, mk MakePair) {
	tests := []struct {
		name            string
		proposal, local conn.Params
		want            conn.Params
	}{
		{"receiver smaller", conn.NewParams(8192, 8), conn.NewParams(4096, 4), conn.NewParams(4096, 4)},
		{"sender smaller", conn.NewParams(1024, 3), conn.NewParams(4096, 4), conn.NewParams(1024, 3)},
		{"mixed", conn.NewParams(4096, 3), conn.NewParams(1024, 16), conn.NewParams(1024, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r, err := mk(t, tt.proposal, tt.local)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer s.Close()
			defer r.Close()
			openWindow(t, s, r)
			for _, end := range []struct {
				name string
				c    conn.Conn
				l    conn.Layout
			}{{"sender", s, conn.SenderLayout(tt.proposal)}, {"receiver", r, conn.ReceiverLayout(tt.want)}} {
				info := end.c.Info()
				if info.Chunk != tt.want.Chunk || info.Depth != tt.want.Depth {
					t.Errorf("%s: Info chunk %d depth %d, want %d %d", end.name, info.Chunk, info.Depth, tt.want.Chunk, tt.want.Depth)
				}
				if info.Transport == "" || info.Local == "" || info.Remote == "" {
					t.Errorf("%s: incomplete Info %+v", end.name, info)
				}
				checkLayout(t, end.name, end.c, end.l)
			}
		})
	}
}

// checkLayout checks that c has the buffers l asks for.
func checkLayout(t *testing.T, name string, c conn.Conn, l conn.Layout) {
	t.Helper()
	if c.SendBufs() != l.SendBufs || c.RecvBufs() != l.RecvBufs {
		t.Fatalf("%s: %d send and %d receive buffers, want %d and %d", name, c.SendBufs(), c.RecvBufs(), l.SendBufs, l.RecvBufs)
	}
	for i := range l.SendBufs {
		if len(c.SendBuf(i)) != l.SendSize {
			t.Errorf("%s: send buffer %d holds %d bytes, want %d", name, i, len(c.SendBuf(i)), l.SendSize)
		}
	}
	// A receiver that keeps its spares for control messages (a ring for
	// remote writes, TCP) may give them just that much room.
	for i := range l.RecvBufs {
		got := len(c.RecvBuf(i))
		spare := i >= l.RecvBufs-conn.SpareRecvs && got == min(l.RecvSize, conn.MaxControl)
		if got != l.RecvSize && !spare {
			t.Errorf("%s: receive buffer %d holds %d bytes, want %d", name, i, got, l.RecvSize)
		}
	}
}

// testSizes sends messages of the extreme sizes and checks both
// completions and the bytes.
func testSizes(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	for _, n := range []int{0, 1, conn.TrailerLen, full(r) - 1, full(r)} {
		want := pattern(n, n)
		send(t, s, 0, want)
		got := collect(t, r, 1)[0]
		if got.Op != conn.OpRecv || got.Len != n {
			t.Fatalf("%d bytes: receiver got %+v", n, got)
		}
		if !bytes.Equal(r.RecvBuf(got.Buf)[:n], want) {
			t.Fatalf("%d bytes: wrong bytes arrived", n)
		}
		if err := r.PostRecv(got.Buf); err != nil {
			t.Fatal(err)
		}
		if c := collect(t, s, 1)[0]; c != (conn.Completion{Op: conn.OpSend, Buf: 0, Len: n}) {
			t.Fatalf("%d bytes: sender got %+v", n, c)
		}
	}
}

// testControlSizes sends control messages of the extreme sizes both ways.
func testControlSizes(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	for _, dir := range []struct {
		name     string
		from, to conn.Conn
	}{{"to sender", r, s}, {"to receiver", s, r}} {
		for _, n := range []int{0, 1, conn.MaxControl} {
			want := pattern(n, n)
			if err := dir.from.SendControl(context.Background(), want); err != nil {
				t.Fatal(err)
			}
			got := collect(t, dir.to, 1)[0]
			if got.Op != conn.OpRecv || got.Len != n || !bytes.Equal(dir.to.RecvBuf(got.Buf)[:n], want) {
				t.Fatalf("%s, %d bytes: got %+v %x", dir.name, n, got, dir.to.RecvBuf(got.Buf)[:got.Len])
			}
			if err := dir.to.PostRecv(got.Buf); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// orderCount is how many messages testOrder streams.
const orderCount = 300

// testOrder streams messages of varying sizes under credit flow control,
// with the receiver re-posting buffers and returning credits from another
// goroutine than its Poll, and checks that every message arrives once and
// in order.
func testOrder(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	size := func(k int) int { return 4 + k*97%(full(r)-3) }
	done := make(chan struct{})
	go receiveInOrder(t, r, size, done)

	credits, sent := credits(r), 0
	var free []int
	for i := range s.SendBufs() {
		free = append(free, i)
	}
	for sent < orderCount {
		for credits > 0 && len(free) > 0 && sent < orderCount {
			msg := pattern(sent, size(sent))
			binary.LittleEndian.PutUint32(msg, uint32(sent))
			send(t, s, free[0], msg)
			free, credits, sent = free[1:], credits-1, sent+1
		}
		for _, c := range collect(t, s, 1) {
			if c.Op == conn.OpSend {
				free = append(free, c.Buf)
				continue
			}
			credits++
			if err := s.PostRecv(c.Buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	<-done
}

// receiveInOrder is testOrder's receiver. It checks orderCount messages,
// handing each buffer to a second goroutine that re-posts it and returns a
// credit, and closes done when it has finished.
func receiveInOrder(t *testing.T, r conn.Conn, size func(int) int, done chan<- struct{}) {
	defer close(done)
	repost := make(chan int, r.RecvBufs())
	reposted := make(chan struct{})
	go func() {
		defer close(reposted)
		for i := range repost {
			if err := r.PostRecv(i); err != nil {
				t.Error(err)
				return
			}
			if err := r.SendControl(context.Background(), []byte{1}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(repost); <-reposted }()
	for k := 0; k < orderCount; {
		cs := make([]conn.Completion, 4)
		n, err := r.Poll(t.Context(), cs)
		if err != nil {
			t.Errorf("receiver poll after %d messages: %v", k, err)
			return
		}
		for _, c := range cs[:n] {
			want := pattern(k, size(k))
			binary.LittleEndian.PutUint32(want, uint32(k))
			if c.Op != conn.OpRecv || !bytes.Equal(r.RecvBuf(c.Buf)[:c.Len], want) {
				t.Errorf("message %d: got %+v, not the bytes sent", k, c)
				return
			}
			repost <- c.Buf
			k++
		}
	}
}

// testRecvReuse checks that messages land only in posted receive buffers,
// never twice in one without a PostRecv between (data buffers go back in
// arrival order, as conn.Conn requires), and that old contents are
// replaced.
func testRecvReuse(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	posted := map[int]bool{}
	for i := range r.RecvBufs() {
		posted[i] = true
	}
	n := credits(r)
	for round := range 3 {
		for k := range n {
			send(t, s, k, pattern(round*n+k, 100-round))
		}
		got := collect(t, r, n)
		collect(t, s, n)
		for k, c := range got {
			if !posted[c.Buf] {
				t.Fatalf("round %d: message %d landed in buffer %d, which was not posted", round, k, c.Buf)
			}
			posted[c.Buf] = false
			if !bytes.Equal(r.RecvBuf(c.Buf)[:c.Len], pattern(round*n+k, 100-round)) {
				t.Errorf("round %d: message %d: wrong bytes", round, k)
			}
		}
		for _, c := range got {
			if err := r.PostRecv(c.Buf); err != nil {
				t.Fatal(err)
			}
			posted[c.Buf] = true
		}
	}
}

// testControlCopied checks that SendControl copies its argument and
// reports no completion.
func testControlCopied(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	for _, dir := range []struct {
		name     string
		from, to conn.Conn
	}{{"to sender", r, s}, {"to receiver", s, r}} {
		p := pattern(1, 40)
		if err := dir.from.SendControl(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		clear(p)
		got := collect(t, dir.to, 1)[0]
		if !bytes.Equal(dir.to.RecvBuf(got.Buf)[:got.Len], pattern(1, 40)) {
			t.Errorf("%s: the message changed with the caller's slice", dir.name)
		}
		quiet(t, dir.from)
	}
}
