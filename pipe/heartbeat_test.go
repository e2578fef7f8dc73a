package pipe_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
)

// TestBeatsWhileCreditsTrickle streams to a receiver whose output takes
// 100 ms a write, so that once the sender has posted the end of the
// stream the receiver still returns a credit every 100 ms, for twice its
// Timeout: the sender, with nothing left to post and hearing the receiver
// all along, must still beat, or the receiver gives it up as silent (as a
// relay gave up rdmasend in the VM while it resent to the receiver after a
// dead one).
func TestBeatsWhileCreditsTrickle(t *testing.T) {
	// Not parallel: its 1 s timeout must not fire while other tests take the CPU.
	p := conn.NewParams(1<<20, 24) // a credit returned per write, 23 of them
	sc, rc := memPair(t, p, p, memconn.Faults{})
	in := randomBytes(40*4096, 50) // 40 messages of 4 KiB (cutReader)
	out := &slowWriter{pause: 100 * time.Millisecond}
	recvErr := make(chan error, 1)
	go func() {
		_, err := pipe.Receive(context.Background(), rc, out, pipe.ReceiveConfig{Timeout: time.Second})
		recvErr <- err
	}()
	_, err := pipe.Send(context.Background(), sc, &cutReader{r: bytes.NewReader(in)}, pipe.SendConfig{Timeout: time.Second})
	checkErr(t, "sender", err, 0, "")
	checkErr(t, "receiver", <-recvErr, 0, "")
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("the receiver wrote %d bytes, want %d identical ones", out.Len(), len(in))
	}
}

// slowWriter is an output that takes pause for each write.
type slowWriter struct {
	testutil.Buffer
	pause time.Duration
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.pause)
	return w.Buffer.Write(p)
}
