package conntest

import (
	"bytes"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// testForward checks a transport's conn.Forwarder, if it has one: messages
// that arrived at one pair's receiver, sent on by another pair's sender
// straight from those receive buffers, arrive whole, and each forward is
// reported as OpForward with the buffer it sent from.
func testForward(t *testing.T, mk MakePair) {
	s1, r1 := Connect(t, mk)
	s2, r2 := Connect(t, mk)
	fw, ok := s2.(conn.Forwarder)
	if !ok {
		t.Skip("the transport does not forward")
	}
	if err := fw.Adopt(r1); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	n := min(credits(r1), credits(r2), s1.SendBufs())
	var want [][]byte
	for k := range n {
		msg := pattern(k+100, 1+k*331%full(r1))
		want = append(want, msg)
		send(t, s1, k, msg)
	}
	var arrived []conn.Completion
	for _, c := range collect(t, r1, n) {
		if c.Op != conn.OpRecv {
			t.Fatalf("first receiver: completion %+v, want a receive", c)
		}
		arrived = append(arrived, c)
	}
	for _, c := range arrived {
		if err := fw.PostForward(c.Buf, c.Len); err != nil {
			t.Fatalf("post forward of buffer %d: %v", c.Buf, err)
		}
	}
	for k, c := range collect(t, r2, n) {
		if got := r2.RecvBuf(c.Buf)[:c.Len]; c.Op != conn.OpRecv || !bytes.Equal(got, want[k]) {
			t.Fatalf("forwarded message %d: %+v, %d bytes, want the %d sent", k, c, c.Len, len(want[k]))
		}
	}
	forwarded := map[int]int{} // buffer: bytes
	for len(forwarded) < n {
		for _, c := range collect(t, s2, 1) {
			if c.Op != conn.OpForward {
				t.Fatalf("forwarding sender: completion %+v, want OpForward", c)
			}
			forwarded[c.Buf] = c.Len
		}
	}
	for _, c := range arrived {
		if got, ok := forwarded[c.Buf]; !ok || got != c.Len {
			t.Errorf("OpForward for receive buffer %d: %d bytes (reported %v), want %d", c.Buf, got, ok, c.Len)
		}
	}
}
