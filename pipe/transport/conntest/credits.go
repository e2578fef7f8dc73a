package conntest

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
)

// testSpares checks that a receiver's spares take control messages while
// every data buffer is full and none has been re-posted, as the engine's
// control credits assume: SpareRecvs of them arrive, and after a spare is
// re-posted, one more does.
func testSpares(t *testing.T, mk MakePair) {
	s, r := connect(t, mk)
	n := credits(r)
	for k := range n {
		send(t, s, k, pattern(k, full(r)))
	}
	var want [][]byte
	control := func(k int) {
		msg := pattern(k+50, 1+k*17%pipe.MaxControl)
		want = append(want, msg)
		if err := s.SendControl(context.Background(), msg); err != nil {
			t.Fatalf("control message %d: %v", k, err)
		}
	}
	for k := range pipe.SpareRecvs {
		control(k)
	}
	check := func(k int, c pipe.Completion) {
		if b := r.RecvBuf(c.Buf)[:c.Len]; !bytes.Equal(b, want[k]) {
			t.Errorf("control message %d arrived as %d bytes in buffer %d, want the %d sent", k, c.Len, c.Buf, len(want[k]))
		}
	}
	got := collect(t, r, n+pipe.SpareRecvs)
	for k, c := range got[n:] {
		check(k, c)
	}
	if err := r.PostRecv(got[n].Buf); err != nil {
		t.Fatalf("re-post spare %d: %v", got[n].Buf, err)
	}
	control(pipe.SpareRecvs)
	check(pipe.SpareRecvs, collect(t, r, 1)[0])
}

// testControlCredits runs the engine over the transport where the sender
// has more control messages to send at once than the receiver has spares
// (its authentication, then a chain naming one receiver with a long name,
// which takes two messages): it must wait for each control credit, and
// the stream arrive whole at both receivers.
func testControlCredits(t *testing.T, mk MakePair) {
	s1, r1 := connect(t, mk)
	s2, r2 := connect(t, mk)
	next := strings.Repeat("n", 255)
	in := pattern(7, 300_000)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var outs [2]testutil.Buffer
	var errs [2]error
	var wg sync.WaitGroup
	relay := pipe.Config{Relay: func(_ context.Context, next string) (string, error) { return next, nil }, Forward: func(_ context.Context, addr string) (pipe.Conn, error) {
		if addr != next {
			t.Errorf("relay to %q, want the %d-byte name", addr, len(next))
		}
		return s2, nil
	}}
	wg.Go(func() { _, errs[0] = pipe.Receive(ctx, r1, &outs[0], relay) })
	wg.Go(func() { _, errs[1] = pipe.Receive(ctx, r2, &outs[1], pipe.Config{}) })
	_, err := pipe.Send(ctx, s1, bytes.NewReader(in), pipe.Config{Chain: []string{next}})
	wg.Wait()
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	for k := range outs {
		if errs[k] != nil {
			t.Errorf("receiver %d: %v", k, errs[k])
		}
		if !bytes.Equal(outs[k].Bytes(), in) {
			t.Errorf("receiver %d wrote %d bytes, want %d identical ones", k, len(outs[k].Bytes()), len(in))
		}
	}
}
