package pipe_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
)

// TestEndWhileRejoining loses a relaying receiver's sender, so that the
// receiver awaits a rejoin for far longer than the test, and then ends
// its stream otherwise: its relay's next receiver goes, or its caller
// cancels. The receiver must fail at once with that reason, having
// written only the start of the stream.
func TestEndWhileRejoining(t *testing.T) {
	t.Parallel()
	errSignal := errors.New("a signal")
	tests := []struct {
		name string
		end  func(next conn.Conn, cancel context.CancelCauseFunc)
		kind conn.Kind
		says string
	}{
		{"the next receiver goes", func(next conn.Conn, _ context.CancelCauseFunc) { next.Close() }, conn.KindAborted, "forward to next"},
		{"the caller cancels", func(_ conn.Conn, cancel context.CancelCauseFunc) { cancel(errSignal) }, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := randomBytes(1<<20, 46)
			// Far longer than the test waits: only the end it is given
			// may end the wait for a rejoin.
			cfg := pipe.ReceiveConfig{Key: []byte("k"), Timeout: time.Minute, HandshakeTimeout: time.Minute}
			p := conn.NewParams(4096, 4)
			sc, rc := memPair(t, p, p, memconn.Faults{})
			nextSend, nextRecv := memPair(t, p, p, memconn.Faults{})
			go func() { _, _ = pipe.Receive(context.Background(), nextRecv, &testutil.Buffer{}, cfg) }()

			asked := make(chan struct{}, 1)
			rcfg := cfg
			rcfg.Relay = pipe.RelayConfig{To: "next", Dial: func(context.Context, string) (conn.Conn, error) { return nextSend, nil }}
			rcfg.Rejoin = func(ctx context.Context) (conn.Conn, error) {
				asked <- struct{}{}
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			out := &testutil.Buffer{}
			recvErr := make(chan error, 1)
			go func() {
				_, err := pipe.Receive(ctx, rc, out, rcfg)
				recvErr <- err
			}()
			go func() {
				cr := &cutReader{r: bytes.NewReader(in), at: 256 << 10, cut: func() { sc.Close() }}
				_, _ = pipe.Send(context.Background(), sc, cr, senderCfg(cfg))
			}()

			select {
			case <-asked:
			case <-time.After(hostileBound):
				t.Fatal("the receiver did not await a rejoin")
			}
			tt.end(nextSend, cancel)
			select {
			case err := <-recvErr:
				if tt.kind == 0 {
					if !errors.Is(err, errSignal) {
						t.Errorf("receiver: %v, want the caller's cause", err)
					}
				} else {
					checkErr(t, "receiver", err, tt.kind, tt.says)
				}
			case <-time.After(hostileBound):
				t.Fatal("the receiver still awaits a rejoin")
			}
			if !bytes.HasPrefix(in, out.Bytes()) {
				t.Errorf("the receiver wrote %d bytes that are not the start of the input", out.Len())
			}
		})
	}
}
