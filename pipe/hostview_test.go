package pipe_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
)

// heldWriter holds every write until open is closed: an output that
// cannot keep up.
type heldWriter struct {
	open chan struct{}
	buf  testutil.Buffer
}

func (w *heldWriter) Write(p []byte) (int, error) {
	<-w.open
	return w.buf.Write(p)
}

// TestHostView streams to a chain of three keyed receivers over memconn,
// the second of which cannot write its output until released, the input
// open until then: the sender's Gauges.Hosts must name place 2 as behind
// (what came so far in its lag) and the others as not, and the stream
// must then end whole, with Stats.Hosts holding the most place 2 was
// behind and the view, once confirmed, no host behind.
func TestHostView(t *testing.T) {
	t.Parallel()
	p := conn.NewParams(4096, 4)
	in := randomBytes(200*4096, 44)
	key := []byte("k")
	slow := &heldWriter{open: make(chan struct{})}
	outs := []io.Writer{&testutil.Buffer{}, slow, &testutil.Buffer{}}
	ends := make([][2]conn.Conn, len(outs))
	for i := range ends {
		sc, rc, err := memconn.Pair(p, p, memconn.Faults{})
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = [2]conn.Conn{sc, rc}
		defer sc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(outs))
	for i, out := range outs {
		cfg := pipe.ReceiveConfig{Key: key, Lag: pipe.LagConfig{Memory: 8 << 20}, Relay: pipe.RelayConfig{Allow: relayAnywhere,
			Dial: func(_ context.Context, addr string) (conn.Conn, error) {
				var n int
				if _, err := fmt.Sscanf(addr, "hop%d", &n); err != nil || n < 1 || n >= len(ends) {
					return nil, fmt.Errorf("no receiver %q", addr)
				}
				return ends[n][0], nil
			}}}
		wg.Go(func() {
			_, errs[i] = pipe.Receive(ctx, ends[i][1], out, cfg)
			ends[i][1].Close()
		})
	}
	g := &pipe.Gauges{}
	sent := make(chan pipe.Stats, 1)
	input, feed := io.Pipe()
	go func() {
		st, err := pipe.Send(ctx, ends[0][0], input, pipe.SendConfig{Key: key, Chain: []string{"hop1", "hop2"}, Gauges: g, HostsEvery: 20 * time.Millisecond})
		if err != nil {
			t.Errorf("send: %v", err)
		}
		sent <- st
	}()
	// The stream stays open until the view is seen, as a longer one would.
	if _, err := feed.Write(in[:len(in)-1]); err != nil {
		t.Fatal(err)
	}
	seen := waitHosts(ctx, g, func(h []pipe.HostLag) bool {
		return len(h) == 3 && h[1].Behind >= int64(len(in))/2 && h[0].Behind == 0 && h[2].Behind == 0
	})
	close(slow.open)
	feed.Write(in[len(in)-1:])
	feed.Close()
	if seen == nil {
		t.Fatalf("the sender never saw place 2 behind and the others not; last: %v", g.Hosts())
	}
	for i, want := range []int{1, 2, 3} {
		if i < len(seen) && seen[i].Place != want {
			t.Errorf("host %d of the view is place %d, want %d", i, seen[i].Place, want)
		}
	}
	st := <-sent
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("receiver %d: %v", i+1, err)
		}
	}
	if !bytes.Equal(slow.buf.Bytes(), in) {
		t.Errorf("the slow receiver wrote %d bytes, want %d", len(slow.buf.Bytes()), len(in))
	}
	if len(st.Hosts) != 3 || st.Hosts[1].Place != 2 || st.Hosts[1].Behind < seen[1].Behind || 4*st.Hosts[0].Behind > seen[1].Behind || g.Hosts()[1].Behind != 0 || g.RefusedReports() != 0 {
		t.Errorf("Stats.Hosts = %v, %d refused: want place 2 by far the most behind, at least %d bytes, and none now; none refused", st.Hosts, g.RefusedReports(), seen[1].Behind)
	}
}

// waitHosts polls g until ok holds for its hosts, and returns them; nil
// if ctx ended first.
func waitHosts(ctx context.Context, g *pipe.Gauges, ok func([]pipe.HostLag) bool) []pipe.HostLag {
	for {
		if h := g.Hosts(); ok(h) {
			return h
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}
