// Package conntest checks that an implementation of conn.Conn keeps the
// contract documented on conn.Conn, as seen by the engine. Each transport
// calls Run from its own tests.
package conntest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// MakePair connects a sender proposing proposal to a receiver configured
// with local. It returns both ends, or the error the sender got.
type MakePair func(t *testing.T, proposal, local conn.Params) (sender, receiver conn.Conn, err error)

// The parameters of the pairs Run makes: the receiver halves the sender's
// chunk and depth, so the negotiated values differ from both proposals.
var (
	proposal = conn.NewParams(8192, 8)
	local    = conn.NewParams(4096, 4)
)

// wait bounds every wait in the suite, so that a broken transport fails the
// test instead of hanging it.
const wait = 10 * time.Second

// Run runs the contract suite against the pairs mk makes.
func Run(t *testing.T, mk MakePair) {
	tests := []struct {
		name string
		run  func(*testing.T, MakePair)
	}{
		{"Negotiate", testNegotiate},
		{"VersionMismatch", testVersionMismatch},
		{"Sizes", testSizes},
		{"ControlSizes", testControlSizes},
		{"Order", testOrder},
		{"RecvReuse", testRecvReuse},
		{"ControlCopied", testControlCopied},
		{"BadRequests", testBadRequests},
		{"PeerClose", testPeerClose},
		{"CloseFlushes", testCloseFlushes},
		{"CloseUnblocksPoll", testCloseUnblocksPoll},
		{"PollContext", testPollContext},
		{"Oversize", testOversize},
		{"Forward", testForward},
		{"Spares", testSpares},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, mk) })
	}
}

// Connect makes a pair with the suite's parameters, opens the receiver's
// window as the engine does, and closes both ends when the test ends.
func Connect(t *testing.T, mk MakePair) (s, r conn.Conn) {
	t.Helper()
	s, r, err := mk(t, proposal, local)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = r.Close()
	})
	openWindow(t, s, r)
	return s, r
}

// openWindow opens the receiver's window, where it has one (conn.Window),
// as the engine does after the handshake, and hands the sender its
// description.
func openWindow(t *testing.T, s, r conn.Conn) {
	t.Helper()
	w, ok := r.(conn.Window)
	if !ok {
		return
	}
	desc, err := w.OpenWindow()
	if err != nil {
		t.Fatalf("open window: %v", err)
	}
	if ws, ok := s.(conn.WindowSetter); ok {
		if err := ws.SetWindow(desc); err != nil {
			t.Fatalf("set window: %v", err)
		}
	}
}

// collect polls c until it has n completions, failing the test on an error.
func collect(t *testing.T, c conn.Conn, n int) []conn.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var got []conn.Completion
	for len(got) < n {
		cs := make([]conn.Completion, n-len(got))
		k, err := c.Poll(ctx, cs)
		if err != nil {
			t.Fatalf("poll after %d of %d completions: %v", len(got), n, err)
		}
		got = append(got, cs[:k]...)
	}
	return got
}

// quiet checks that c reports no completion for a little while.
func quiet(t *testing.T, c conn.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	cs := make([]conn.Completion, 1)
	if n, err := c.Poll(ctx, cs); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("poll = %d %v, %v; want no completion", n, cs[:n], err)
	}
}

// failure polls c until it returns an error, skipping completions, and
// returns the error.
func failure(t *testing.T, c conn.Conn) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cs := make([]conn.Completion, 16)
	for {
		if _, err := c.Poll(ctx, cs); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("poll: no failure within %v", wait)
			}
			return err
		}
	}
}

// result waits for a pending Poll's error.
func result(t *testing.T, polled <-chan error) error {
	t.Helper()
	select {
	case err := <-polled:
		return err
	case <-time.After(wait):
		t.Fatalf("poll still pending after %v", wait)
		return nil
	}
}

// send copies b into send buffer i of c and posts it.
func send(t *testing.T, c conn.Conn, i int, b []byte) {
	t.Helper()
	copy(c.SendBuf(i), b)
	if err := c.PostSend(i, len(b)); err != nil {
		t.Fatalf("post send %d: %v", i, err)
	}
}

// pattern returns n bytes that differ with seed.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7)
	}
	return b
}

// full is the largest message the receiver accepts.
func full(r conn.Conn) int { return len(r.RecvBuf(0)) }

// credits is how many data messages the receiver takes at once: one per
// receive buffer but the spares it keeps for control messages (see
// conn.Conn).
func credits(r conn.Conn) int { return r.RecvBufs() - conn.SpareRecvs }
