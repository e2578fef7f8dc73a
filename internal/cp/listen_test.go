package cp

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

func TestParsePorts(t *testing.T) {
	for s, want := range map[string]portRange{"5000-5010": {5000, 5010}, "5000": {5000, 5000}, "1-65535": {1, 65535}} {
		if got, err := parsePorts(s); err != nil || got != want {
			t.Errorf("parsePorts(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0-10", "10-5", "1-65536", "a-b", "5000-", "-5000", "1-2-3"} {
		if _, err := parsePorts(s); err == nil {
			t.Errorf("parsePorts(%q): no error", s)
		}
	}
}

// TestListenInRange occupies a range of ports (or finds them taken) and
// listens in it: a setup failure naming the range; then frees the last
// of its own, which the listener takes.
func TestListenInRange(t *testing.T) {
	lo := testutil.FreePort(t)
	r := portRange{lo, lo + 3}
	mine := map[int]net.Listener{}
	for port := r.Lo; port <= r.Hi; port++ {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			mine[port] = l
			defer l.Close()
		}
	}
	p := conn.NewParams(conn.DefaultChunk, conn.DefaultDepth)
	_, _, err := listenAnyPort(context.Background(), "tcp", "127.0.0.1", r, p, io.Discard)
	if conn.KindOf(err) != conn.KindSetup || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("no free port in %d-%d (--data-ports)", r.Lo, r.Hi)) {
		t.Fatalf("every port taken: got %v, want a setup failure naming the range", err)
	}
	want := r.Hi // the last of ours: those before it stay taken
	for want >= r.Lo && mine[want] == nil {
		want--
	}
	if want < r.Lo {
		t.Fatalf("ports %v: all taken by other processes", r)
	}
	mine[want].Close()
	l, port, err := listenAnyPort(context.Background(), "tcp", "127.0.0.1", r, p, io.Discard)
	if err != nil || port != want {
		t.Fatalf("one port free: got port %d, %v; want %d", port, err, want)
	}
	l.Close()
}
