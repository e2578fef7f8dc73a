package pipe_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
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

// TestHostView streams to a chain of keyed receivers over memconn, one of
// which cannot write its output until released, the input open until
// then: the sender's Gauges.Hosts must name that place as behind (what
// came so far in its lag) and the others as not, and the stream must then
// end whole, with Stats.Hosts holding the most it was behind and the
// view, once confirmed, no host behind. In a chain longer than a report
// holds, the report names the hosts furthest behind, wherever they are.
func TestHostView(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ hosts, slow int }{{3, 2}, {14, 13}} {
		t.Run(fmt.Sprintf("%d hosts, place %d slow", c.hosts, c.slow), func(t *testing.T) {
			t.Parallel()
			hostView(t, c.hosts, c.slow)
		})
	}
}

// hostView is TestHostView's chain of hosts receivers, place slow held.
func hostView(t *testing.T, hosts, slowPlace int) {
	p := conn.NewParams(4096, 4)
	in := randomBytes(200*4096, 44)
	key := []byte("k")
	slow := &heldWriter{open: make(chan struct{})}
	outs := make([]io.Writer, hosts)
	chain := make([]string, hosts-1)
	for i := range outs {
		outs[i] = &testutil.Buffer{}
		if i > 0 {
			chain[i-1] = fmt.Sprintf("hop%d", i)
		}
	}
	outs[slowPlace-1] = slow
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
		st, err := pipe.Send(ctx, ends[0][0], input, pipe.SendConfig{Key: key, Chain: chain, Gauges: g, HostsEvery: 20 * time.Millisecond})
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
		return len(h) == min(hosts, 10) && onlyBehind(h, slowPlace, int64(len(in))/2)
	})
	close(slow.open)
	feed.Write(in[len(in)-1:])
	feed.Close()
	if seen == nil {
		t.Fatalf("the sender never saw place %d behind and the others not; last: %v", slowPlace, g.Hosts())
	}
	for i, h := range seen {
		if i == 0 && h.Place != 1 || i > 0 && h.Place <= seen[i-1].Place {
			t.Errorf("the view's places are %v: want place 1 first, then rising", seen)
			break
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
	most := slices.IndexFunc(st.Hosts, func(h pipe.HostLag) bool { return h.Place == slowPlace })
	if most < 0 {
		t.Fatalf("Stats.Hosts = %v: no place %d", st.Hosts, slowPlace)
	}
	others := slices.ContainsFunc(st.Hosts, func(h pipe.HostLag) bool { return h.Place != slowPlace && 2*h.Behind > st.Hosts[most].Behind })
	if st.Hosts[most].Behind < int64(len(in))/2 || others || anyBehind(g.Hosts()) || g.RefusedReports() != 0 {
		t.Errorf("Stats.Hosts = %v, %d refused, now %v: want place %d by far the most behind, and none now; none refused", st.Hosts, g.RefusedReports(), g.Hosts(), slowPlace)
	}
}

// onlyBehind reports whether hosts name place as at least min bytes
// behind, and every other host as not behind.
func onlyBehind(hosts []pipe.HostLag, place int, min int64) bool {
	found := false
	for _, h := range hosts {
		switch {
		case h.Place == place:
			found = h.Behind >= min
		case h.Behind != 0:
			return false
		}
	}
	return found
}

// anyBehind reports whether any of hosts is behind.
func anyBehind(hosts []pipe.HostLag) bool {
	return slices.ContainsFunc(hosts, func(h pipe.HostLag) bool { return h.Behind != 0 })
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
