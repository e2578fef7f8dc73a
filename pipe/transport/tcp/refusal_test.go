package tcp

import (
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// oldProposal is a well-formed proposal of another protocol version.
func oldProposal(t *testing.T) []byte {
	p := proposal
	p.Version = conn.Version + 1
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// talk connects to addr from the address from, sends b, and returns all
// the listener answered before it hung up.
func talk(t *testing.T, addr, from string, b []byte) []byte {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testutil.Bound(10 * time.Second)))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the listener neither answered %q nor hung up", b)
	}
	return got
}

// TestRefusalsHoldNothing refuses 200 proposals of another version while
// no Accept waits: every refused handshake ends at once, leaving no
// goroutine and no slot behind, and a good sender gets through after them.
// It counts the process's goroutines, so it does not run in parallel.
func TestRefusalsHoldNothing(t *testing.T) {
	l, err := ListenConfig{HandshakeTimeout: time.Hour}.Listen(t.Context(), "127.0.0.1:0", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	base := runtime.NumGoroutine()
	old := oldProposal(t)
	for range 200 {
		talk(t, l.Addr(), "127.0.0.2", old)
	}
	testutil.WaitFor(t, 10*time.Second, "the refused handshakes to end", func() bool {
		return l.inProgress() == 0 && runtime.NumGoroutine() <= base
	})
	for len(l.refused) > 0 {
		<-l.refused
	}
	s, r, err := dialAccept(t, l, l.Addr(), proposal)
	if err != nil {
		t.Fatalf("a good sender after the refusals: %v", err)
	}
	_ = s.Close()
	_ = r.Close()
}

// TestPenalty checks what a source that failed costs from then on: its
// first refusal is answered, its next ones not, its silent connections end
// long before the handshake timeout, and a good sender from it still gets
// through; another source's refusal is answered. Refusals are reported
// (conn.ErrRefused), as many as the backlog holds.
func TestPenalty(t *testing.T) {
	t.Parallel()
	l, err := ListenConfig{HandshakeTimeout: time.Hour}.Listen(t.Context(), "127.0.0.1:0", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	old := oldProposal(t)
	if got := talk(t, l.Addr(), "127.0.0.3", old); len(got) != conn.ParamsLen {
		t.Errorf("first refusal answered with %q, want the listener's version", got)
	}
	for range 40 {
		if got := talk(t, l.Addr(), "127.0.0.3", old); len(got) != 0 {
			t.Fatalf("a penalized source's refusal answered with %q", got)
		}
	}
	if got := talk(t, l.Addr(), "127.0.0.3", nil); len(got) != 0 {
		t.Errorf("a penalized source's silent connection answered with %q", got)
	}
	if got := talk(t, l.Addr(), "127.0.0.4", old); len(got) != conn.ParamsLen {
		t.Errorf("another source's refusal answered with %q", got)
	}
	if n := len(l.refused); n != refusalBacklog {
		t.Errorf("%d refusals reported, want the backlog's %d", n, refusalBacklog)
	}
	// 127.0.0.4's refusal is reported after its answer, whenever the
	// backlog has room: here, or at the Accept below.
	for len(l.refused) > 0 {
		if err := <-l.refused; !errors.Is(err, conn.ErrRefused) || !strings.Contains(err.Error(), "accept from 127.0.0.3") && !strings.Contains(err.Error(), "accept from 127.0.0.4") {
			t.Errorf("reported %v, want a refusal of 127.0.0.3 or .4", err)
		}
	}
	good := proposal
	b, _ := good.MarshalBinary()
	if got := talk(t, l.Addr(), "127.0.0.3", b[:len(b)-1]); len(got) != 0 {
		t.Errorf("half a proposal answered with %q", got)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	c, err := d.DialContext(t.Context(), "tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, conn.ParamsLen)); err != nil {
		t.Fatalf("a good sender from the penalized source got no answer: %v", err)
	}
	r, err := l.Accept(t.Context())
	if errors.Is(err, conn.ErrRefused) && strings.Contains(err.Error(), "accept from 127.0.0.4") {
		r, err = l.Accept(t.Context())
	}
	if err != nil {
		t.Fatalf("a good sender from the penalized source: %v", err)
	}
	_ = r.Close()
}
