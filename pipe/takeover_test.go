package pipe_test

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
)

// TestTakeOverBacksOffABusyFallback takes a stream over at a fallback
// that refuses the taker-over as busy for two seconds (it still has its
// upstream): the taker-over waits longer after each refusal, so that it
// connects a few times, not every 50 ms (over RDMA each attempt registers
// a connection's buffers: the old fixed pause spun a core in the VM), and
// the stream completes at the fallback once it takes it.
func TestTakeOverBacksOffABusyFallback(t *testing.T) {
	t.Parallel()
	const busyFor = 2 * time.Second
	in := randomBytes(64<<10, 49)
	key := []byte("k")
	p := conn.NewParams(4096, 4)
	msc, rc := memPair(t, p, p, memconn.Faults{})
	sc := &authSpy{Conn: msc, auths: make(chan []byte, 1)}
	go func() { _, _ = pipe.Receive(context.Background(), rc, io.Discard, pipe.ReceiveConfig{Key: key}) }()
	fsc, frc := memPair(t, p, p, memconn.Faults{})
	claimed := make(chan []byte, 1)
	go scriptedReceiver(t, frc, key, true, 1, "", claimed)
	var attempts atomic.Int32
	var first time.Time
	cfg := pipe.SendConfig{Key: key, Fallback: []pipe.Hop{{Addr: "busy"}},
		Dial: func(context.Context, string) (conn.Conn, error) {
			if attempts.Add(1) == 1 {
				first = time.Now()
			}
			if time.Since(first) < busyFor {
				return nil, conn.Errorf(conn.KindBusy, "connect busy", "the receiver is busy with another stream")
			}
			return fsc, nil
		}}
	cr := &cutReader{r: bytes.NewReader(in), at: 16 << 10, cut: func() { sc.Close() }}
	st, err := pipe.Send(context.Background(), sc, cr, cfg)
	checkErr(t, "sender", err, 0, "")
	<-claimed
	if n := attempts.Load(); n < 2 || n > 10 {
		t.Errorf("the taker-over connected %d times to a fallback busy for %v, want 2 to 10 (a pause that doubles from 50 ms up to 1 s)", n, busyFor)
	}
	if err == nil && (st.Receivers != 1 || len(st.Lost) != 1 || slices.Contains(st.Lost, "busy")) {
		t.Errorf("the sender counts %d receivers and lost %q, want 1 and the first", st.Receivers, st.Lost)
	}
}
