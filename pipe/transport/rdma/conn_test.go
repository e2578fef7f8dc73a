package rdma

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/pipetest"
)

// TestConn runs the transport suite (package pipetest) over RDMA (in the SoftRoCE VM),
// on both data paths: RDMA WRITE with immediate into the receiver's ring
// (the default), also striped over three queue pairs, and with each data
// message split into WRITEs of 4 KiB (over two queue pairs), and SEND.
func TestConn(t *testing.T) {
	ip := rxeIP(t)
	cases := []struct {
		name, op string
		qps      int
		maxWrite int
	}{
		{"write", "write", 1, 0},
		{"write over 3 QPs", "write", 3, 0},
		{"write in 4 KiB pieces over 2 QPs", "write", 2, 4096},
		{"send", "send", 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opt := DefaultOptions()
			opt.SendOnly, opt.QPs, opt.MaxWrite = tc.op == "send", tc.qps, tc.maxWrite
			pipetest.Run(t, func(t *testing.T, proposal, local conn.Params) (conn.Conn, conn.Conn, error) {
				s, r, err := makePair(t, ip, proposal, local, opt)
				if err == nil && (s.Info().DataPath != tc.op || r.Info().DataPath != tc.op || s.Info().QPs != tc.qps || r.Info().QPs != tc.qps ||
					s.Info().Write != tc.maxWrite || r.Info().Write != tc.maxWrite) {
					t.Errorf("data path %q and %q over %d and %d QPs in writes of %d and %d bytes, want %q over %d in %d", s.Info().DataPath, r.Info().DataPath,
						s.Info().QPs, r.Info().QPs, s.Info().Write, r.Info().Write, tc.op, tc.qps, tc.maxWrite)
				}
				return s, r, err
			})
		})
	}
}

// makePair connects a sender proposing proposal to a receiver configured
// with local over the RDMA device at ip, both with opt. It returns both
// ends, or the dialer's error; the listener must fail too when the dialer
// does.
func makePair(t *testing.T, ip string, proposal, local conn.Params, opt Options) (sender, receiver conn.Conn, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := Listen(ctx, net.JoinHostPort(ip, "0"), local, opt)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	s, r, err, aerr := dialAccept(ctx, l, Dialer{Options: opt}, proposal)
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
