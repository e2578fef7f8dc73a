package tcp

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/pipetest"
)

func TestConn(t *testing.T) {
	t.Parallel()
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

// TestPulses checks that a receiver that reads a message slowly sends
// pulses, and that pulses take no receive buffer, reach no engine and
// count as progress where they arrive.
func TestPulses(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	p := conn.NewParams(size, 4)
	a, peer := net.Pipe()
	r, err := newConn(a, conn.ReceiverLayout(p), p, conn.SenderLayout(p).RecvBufs, conn.SpareRecvs)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.OpenWindow(); err != nil {
		t.Fatal(err)
	}
	pulses := make(chan int, 1)
	go func() { // what the receiver sends back: pulses only
		n := 0
		var h [frameHeaderLen]byte
		for {
			if _, err := io.ReadFull(peer, h[:]); err != nil {
				pulses <- n
				return
			}
			if binary.LittleEndian.Uint32(h[:]) != pulseFrame {
				t.Errorf("the receiver sent header %x, want only pulses", h)
			}
			n++
		}
	}()
	// A pulse of the sender's, then a message that arrives in 8 pieces
	// over 4 pulse intervals.
	var pulse, h [frameHeaderLen]byte
	binary.LittleEndian.PutUint32(pulse[:], pulseFrame)
	write(t, peer, pulse[:])
	testutil.WaitFor(t, 10*time.Second, "the receiver to count the pulse", func() bool { return r.Progress() == frameHeaderLen })
	frameHeader(h[:], size, false)
	write(t, peer, h[:])
	for k := range 8 {
		time.Sleep(pulseInterval / 2) // a slow link
		write(t, peer, bytes.Repeat([]byte{byte(k)}, size/8))
	}
	cs := make([]conn.Completion, 4)
	n, err := r.Poll(t.Context(), cs)
	if err != nil || n != 1 || cs[0].Op != conn.OpRecv || cs[0].Len != size {
		t.Fatalf("poll: %d completions %v, %v; want the one message of %d bytes", n, cs[:n], err, size)
	}
	r.Close()
	peer.Close()
	if n := <-pulses; n < 2 {
		t.Errorf("the receiver sent %d pulses while a message took 4 pulse intervals to arrive, want at least 2", n)
	}
}

// write writes p to c.
func write(t *testing.T, c net.Conn, p []byte) {
	t.Helper()
	if _, err := c.Write(p); err != nil {
		t.Fatal(err)
	}
}
