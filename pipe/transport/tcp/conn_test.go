package tcp

import (
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/pipetest"
	"github.com/rdmapipe/rdmapipe/pipe/transport/conntest"
)

func TestConn(t *testing.T) {
	pipetest.Run(t, func(t *testing.T, proposal, local conn.Params) (conn.Conn, conn.Conn, error) {
		return makePair(t, proposal, local)
	})
}

// makePair connects a sender to a receiver over loopback.
func makePair(t testing.TB, proposal, local conn.Params) (sender, receiver conn.Conn, err error) {
	t.Helper()
	l, err := Listen(t.Context(), "127.0.0.1:0", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, r, err := dialAccept(t, l, l.Addr(), proposal)
	if err == nil {
		if _, err := r.(conn.Window).OpenWindow(); err != nil {
			t.Fatal(err)
		}
	}
	return s, r, err
}

// dialAccept dials addr while l accepts. It returns both ends, or the
// dialer's error; the listener must fail too when the dialer does.
func dialAccept(t testing.TB, l *Listener, addr string, proposal conn.Params) (sender, receiver conn.Conn, err error) {
	t.Helper()
	type accepted struct {
		c   conn.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := l.Accept(t.Context())
		ch <- accepted{c, err}
	}()
	s, err := Dial(t.Context(), addr, proposal)
	a := <-ch
	switch {
	case err != nil && a.err == nil:
		_ = a.c.Close()
		t.Fatalf("dial failed (%v) but accept succeeded", err)
	case err != nil:
		return nil, nil, err
	case a.err != nil:
		_ = s.Close()
		t.Fatalf("accept: %v", a.err)
	}
	return s, a.c, nil
}

// TestProgress checks that each end's Progress grows with the bytes that
// move, before any whole message comes back: the receiver's as a
// message's bytes arrive, the sender's as the receiver's host
// acknowledges them.
func TestProgress(t *testing.T) {
	const size = 64 << 10
	p := conn.NewParams(size, 4)
	s, r := conntest.Connect(t, func(t *testing.T, _, _ conn.Params) (conn.Conn, conn.Conn, error) {
		return makePair(t, p, p)
	})
	ps, pr := s.(conn.ProgressCounter), r.(conn.ProgressCounter)
	s0, r0 := ps.Progress(), pr.Progress()
	if err := s.PostSend(0, size); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the receiver to count the bytes arriving", func() bool { return pr.Progress() >= r0+size })
	testutil.WaitFor(t, 10*time.Second, "the sender to count the bytes acknowledged", func() bool { return ps.Progress() >= s0+size })
}
