package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// rawSender connects to a new listener by hand, completes the handshake and
// returns the raw connection with the receiver's Conn.
func rawSender(t *testing.T) (net.Conn, conn.Conn) {
	t.Helper()
	l, err := Listen(t.Context(), "127.0.0.1:0", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	b, _ := proposal.MarshalBinary()
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	r, err := l.Accept(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if _, err := r.(conn.Window).OpenWindow(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(nc, b); err != nil {
		t.Fatal(err)
	}
	return nc, r
}

// pollError polls c until it fails and returns the error.
func pollError(t *testing.T, c conn.Conn) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	cs := make([]conn.Completion, 8)
	for {
		if _, err := c.Poll(ctx, cs); err != nil {
			return err
		}
	}
}

// TestBrokenFrames checks the receiver's errors for frames it cannot take.
func TestBrokenFrames(t *testing.T) {
	t.Parallel()
	size := conn.ReceiverLayout(local).RecvSize
	tests := []struct {
		name  string
		frame func() []byte
		kind  conn.Kind
		want  string
	}{
		{"oversize", func() []byte { return frame(size+1, 0) }, conn.KindIntegrity, fmt.Sprintf("peer sent a %d-byte data message but its receive buffers hold %d bytes", size+1, size)},
		{"oversize control", func() []byte { return frame(ctrlFrame|(conn.MaxControl+1), 0) }, conn.KindIntegrity, fmt.Sprintf("peer sent a %d-byte control message but its receive buffers hold %d bytes", conn.MaxControl+1, conn.MaxControl)},
		{"hostile length", func() []byte { return frame(1<<32-1, 0) }, conn.KindIntegrity, fmt.Sprintf("peer sent a %d-byte control message but its receive buffers hold %d bytes", 1<<31-1, conn.MaxControl)},
		{"hostile data length", func() []byte { return frame(1<<31-1, 0) }, conn.KindIntegrity, fmt.Sprintf("peer sent a %d-byte data message but its receive buffers hold %d bytes", 1<<31-1, size)},
		{"cut header", func() []byte { return frame(10, 0)[:2] }, conn.KindAborted, "peer closed the connection"},
		{"cut payload", func() []byte { return frame(100, 10) }, conn.KindAborted, "peer closed the connection in the middle of a message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			nc, r := rawSender(t)
			if _, err := nc.Write(tt.frame()); err != nil {
				t.Fatal(err)
			}
			_ = nc.(*net.TCPConn).CloseWrite()
			err := pollError(t, r)
			if conn.KindOf(err) != tt.kind || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "read from "+nc.LocalAddr().String()) {
				t.Errorf("poll: %v (%v), want %v: read from %s: ...%s", err, conn.KindOf(err), tt.kind, nc.LocalAddr(), tt.want)
			}
		})
	}
}

// frame returns a frame header (n: the length, with ctrlFrame for a
// control message) followed by have bytes.
func frame(n, have int) []byte {
	b := make([]byte, frameHeaderLen+have)
	binary.LittleEndian.PutUint32(b, uint32(n))
	return b
}

// TestPeerClosed checks the error when the peer closes the connection.
func TestPeerClosed(t *testing.T) {
	t.Parallel()
	s, r, err := makePair(t, proposal, local)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = r.Close()
	err = pollError(t, s)
	if want := "read from " + r.Info().Local + ": peer closed the connection"; err.Error() != want || conn.KindOf(err) != conn.KindAborted {
		t.Errorf("poll: %q, want %q", err, want)
	}
	if err := s.PostSend(0, 1); err == nil || errors.Is(err, conn.ErrClosed) {
		t.Errorf("post send on a failed connection: %v", err)
	}
}

// TestNoPostedBuffer checks that a message for which no receive buffer is
// posted fails the connection on both ends, after the messages that had
// one: the engine never sends one, so the peer broke the protocol.
func TestNoPostedBuffer(t *testing.T) {
	t.Parallel()
	s, r, err := makePair(t, proposal, local)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer r.Close()
	n := r.RecvBufs() - conn.SpareRecvs
	for k := range n + 1 {
		copy(s.SendBuf(k), []byte{byte(k)})
		if err := s.PostSend(k, 1); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cs := make([]conn.Completion, n+1)
	got := 0
	for {
		k, err := r.Poll(ctx, cs[got:])
		if err != nil {
			if got != n || conn.KindOf(err) != conn.KindIntegrity || !strings.Contains(err.Error(), "with no receive buffer posted for it") {
				t.Errorf("after %d of %d messages: %v (%v), want an integrity failure after all of them", got, n, err, conn.KindOf(err))
			}
			break
		}
		got += k
	}
	if err := pollError(t, s); conn.KindOf(err) != conn.KindAborted {
		t.Errorf("sender: %v, want the connection lost", err)
	}
}
