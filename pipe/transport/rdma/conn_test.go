package rdma

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/transport/conntest"
)

// TestConn runs the pipe.Conn contract suite over RDMA (in the SoftRoCE VM).
func TestConn(t *testing.T) {
	ip := rxeIP(t)
	conntest.Run(t, func(t *testing.T, proposal, local pipe.Params) (pipe.Conn, pipe.Conn, error) {
		return makePair(t, ip, proposal, local)
	})
}

// makePair connects a sender proposing proposal to a receiver configured
// with local over the RDMA device at ip. It returns both ends, or the
// dialer's error; the listener must fail too when the dialer does.
func makePair(t *testing.T, ip string, proposal, local pipe.Params) (sender, receiver pipe.Conn, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := Listen(ctx, net.JoinHostPort(ip, "0"), local, DefaultOptions())
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	s, r, err, aerr := dialAccept(ctx, l, Dialer{DefaultOptions()}, proposal)
	switch {
	case err != nil && aerr == nil:
		r.Close()
		t.Fatalf("dial failed (%v) but accept succeeded", err)
	case err != nil:
		return nil, nil, err
	case aerr != nil:
		s.Close()
		t.Fatalf("accept: %v", aerr)
	}
	return s, r, nil
}
