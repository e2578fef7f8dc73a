package conntest

import (
	"bytes"
	"context"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// testSpares checks that a receiver's spares take control messages while
// every data buffer is full and none has been re-posted, as the engine's
// control credits assume: conn.SpareRecvs of them arrive, and after a spare is
// re-posted, one more does.
func testSpares(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	n := credits(r)
	for k := range n {
		send(t, s, k, pattern(k, full(r)))
	}
	var want [][]byte
	control := func(k int) {
		msg := pattern(k+50, 1+k*17%conn.MaxControl)
		want = append(want, msg)
		if err := s.SendControl(context.Background(), msg); err != nil {
			t.Fatalf("control message %d: %v", k, err)
		}
	}
	for k := range conn.SpareRecvs {
		control(k)
	}
	check := func(k int, c conn.Completion) {
		if b := r.RecvBuf(c.Buf)[:c.Len]; !bytes.Equal(b, want[k]) {
			t.Errorf("control message %d arrived as %d bytes in buffer %d, want the %d sent", k, c.Len, c.Buf, len(want[k]))
		}
	}
	got := collect(t, r, n+conn.SpareRecvs)
	for k, c := range got[n:] {
		check(k, c)
	}
	if err := r.PostRecv(got[n].Buf); err != nil {
		t.Fatalf("re-post spare %d: %v", got[n].Buf, err)
	}
	control(conn.SpareRecvs)
	check(conn.SpareRecvs, collect(t, r, 1)[0])
}
