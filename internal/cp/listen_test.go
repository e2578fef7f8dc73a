package cp

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestListenInRange occupies a range of ports (or finds them taken) and
// listens in it: a setup failure naming the range; then frees the last
// of its own, which the listener takes.
func TestListenInRange(t *testing.T) {
	lo := testutil.FreePort(t)
	r := proto.PortRange{Lo: lo, Hi: lo + 3}
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
