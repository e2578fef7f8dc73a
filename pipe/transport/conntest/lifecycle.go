package conntest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// testVersionMismatch checks that a receiver refuses another protocol
// version with a setup error that says so.
func testVersionMismatch(t *testing.T, mk MakePair) {
	p := proposal
	p.Version = conn.Version + 1
	s, r, err := mk(t, p, local)
	if err == nil {
		_ = s.Close()
		_ = r.Close()
		t.Fatal("connected with another protocol version")
	}
	if conn.KindOf(err) != conn.KindSetup || !strings.Contains(err.Error(), "version") {
		t.Errorf("error %q (%v), want a setup failure about the version", err, conn.KindOf(err))
	}
}

// testBadRequests checks that misuse is refused with an error.
func testBadRequests(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	tests := []struct {
		name string
		err  func() error
	}{
		{"send buffer -1", func() error { return s.PostSend(-1, 0) }},
		{"send buffer past the end", func() error { return s.PostSend(s.SendBufs(), 0) }},
		{"send longer than the buffer", func() error { return s.PostSend(0, len(s.SendBuf(0))+1) }},
		{"send negative length", func() error { return s.PostSend(0, -1) }},
		{"receive buffer -1", func() error { return r.PostRecv(-1) }},
		{"receive buffer past the end", func() error { return r.PostRecv(r.RecvBufs()) }},
		{"receive buffer already posted", func() error { return r.PostRecv(0) }},
		{"control too long", func() error { return s.SendControl(context.Background(), make([]byte, conn.MaxControl+1)) }},
		{"poll into nothing", func() error { _, err := s.Poll(t.Context(), nil); return err }},
		{"send buffer already posted", func() error {
			if err := s.PostSend(1, 1); err != nil {
				t.Errorf("first post send: %v", err)
			}
			return s.PostSend(1, 1)
		}},
	}
	for _, tt := range tests {
		if tt.err() == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

// testPeerClose checks that closing one end fails the other, after it has
// received what was sent before the close.
func testPeerClose(t *testing.T, mk MakePair) {
	for _, closer := range []string{"sender", "receiver"} {
		t.Run(closer, func(t *testing.T) {
			s, r := Connect(t, mk)
			from, to := s, r
			if closer == "receiver" {
				from, to = r, s
			}
			if err := from.SendControl(context.Background(), []byte("bye")); err != nil {
				t.Fatal(err)
			}
			if err := from.Close(); err != nil {
				t.Fatal(err)
			}
			if c := collect(t, to, 1)[0]; string(to.RecvBuf(c.Buf)[:c.Len]) != "bye" {
				t.Errorf("got %q before the close, want bye", to.RecvBuf(c.Buf)[:c.Len])
			}
			for range 2 {
				if err := failure(t, to); errors.Is(err, conn.ErrClosed) {
					t.Errorf("poll after the peer closed: %v, want an error other than ErrClosed", err)
				}
			}
		})
	}
}

// testCloseFlushes checks that Close sends what was posted before it.
func testCloseFlushes(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	n := credits(r)
	for k := range n {
		send(t, s, k, pattern(k, full(r)))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for k, c := range collect(t, r, n) {
		if string(r.RecvBuf(c.Buf)[:c.Len]) != string(pattern(k, full(r))) {
			t.Errorf("message %d: wrong bytes", k)
		}
	}
	failure(t, r)
}

// testCloseUnblocksPoll checks that Close ends a pending Poll with
// ErrClosed, that later calls fail, and that Close may be repeated and
// called concurrently.
func testCloseUnblocksPoll(t *testing.T, mk MakePair) {
	for _, end := range []string{"sender", "receiver"} {
		t.Run(end, func(t *testing.T) {
			s, r := Connect(t, mk)
			c := s
			if end == "receiver" {
				c = r
			}
			polled := make(chan error, 1)
			go func() {
				_, err := c.Poll(context.Background(), make([]conn.Completion, 1))
				polled <- err
			}()
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					if err := c.Close(); err != nil {
						t.Errorf("close: %v", err)
					}
				})
			}
			wg.Wait()
			if err := result(t, polled); !errors.Is(err, conn.ErrClosed) {
				t.Errorf("pending poll: %v, want ErrClosed", err)
			}
			if _, err := c.Poll(context.Background(), make([]conn.Completion, 1)); !errors.Is(err, conn.ErrClosed) {
				t.Errorf("poll after close: %v, want ErrClosed", err)
			}
			if c.SendControl(context.Background(), []byte{1}) == nil || c.PostRecv(0) == nil {
				t.Error("work posted after close")
			}
			if c.SendBufs() > 0 && c.PostSend(0, 1) == nil {
				t.Error("send posted after close")
			}
			if err := c.Close(); err != nil {
				t.Errorf("second close: %v", err)
			}
		})
	}
}

// testPollContext checks that Poll returns when its context ends and that
// the connection still works afterwards.
func testPollContext(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	ctx, cancel := context.WithCancel(context.Background())
	polled := make(chan error, 1)
	go func() {
		_, err := r.Poll(ctx, make([]conn.Completion, 1))
		polled <- err
	}()
	cancel()
	if err := result(t, polled); !errors.Is(err, context.Canceled) {
		t.Fatalf("poll: %v, want context.Canceled", err)
	}
	send(t, s, 0, []byte("still here"))
	if c := collect(t, r, 1)[0]; string(r.RecvBuf(c.Buf)[:c.Len]) != "still here" {
		t.Errorf("got %q after a cancelled poll", r.RecvBuf(c.Buf)[:c.Len])
	}
}

// testOversize checks that a message larger than the receive buffers fails
// the connection on both ends.
func testOversize(t *testing.T, mk MakePair) {
	s, r := Connect(t, mk)
	if len(s.SendBuf(0)) <= full(r) {
		t.Fatalf("the suite needs send buffers larger than receive buffers")
	}
	send(t, s, 0, make([]byte, full(r)+1))
	if err := failure(t, r); errors.Is(err, conn.ErrClosed) {
		t.Errorf("receiver: %v", err)
	}
	if err := failure(t, s); errors.Is(err, conn.ErrClosed) {
		t.Errorf("sender: %v", err)
	}
}
