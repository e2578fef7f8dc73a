package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestCloseUnblocksWriter checks that Close returns while the writer is
// blocked in write(2) because the peer stopped reading (a partitioned
// network looks the same: no reset, no acknowledgements). The peer answers
// the handshake and then never reads; both socket buffers are made small
// and the sender posts far more than they hold, so the writer blocks.
// Close must return (within a generous bound), and what reached the peer
// must be less than was posted: proof that the writer was cut off in the
// middle rather than done.
func TestCloseUnblocksWriter(t *testing.T) {
	t.Parallel()
	p := conn.NewParams(2<<20, 8)
	pc, s := rawReceiver(t, p)
	_ = s.nc.(*net.TCPConn).SetWriteBuffer(4096)
	posted := 0
	for i := range s.SendBufs() {
		if err := s.PostSend(i, p.Chunk); err != nil {
			t.Fatal(err)
		}
		posted += frameHeaderLen + p.Chunk
	}

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("close did not return with the writer blocked")
	}
	if _, err := s.Poll(t.Context(), make([]conn.Completion, 8)); !errors.Is(err, conn.ErrClosed) {
		t.Errorf("poll after close: %v", err)
	}
	// Read what reached the peer: until the end, or a deadline if the
	// kernel is slow to flush the closed socket (less is read then).
	_ = pc.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.Copy(io.Discard, pc)
	if got >= int64(posted) {
		t.Errorf("the peer read %d bytes of %d posted: the writer was never blocked", got, posted)
	}
	t.Logf("the peer read %d of %d bytes posted", got, posted)
}

// rawReceiver dials a stand-in receiver that accepts the proposal p as it
// is, with a small socket receive buffer, and returns its raw connection
// with the sender's Conn.
func rawReceiver(t *testing.T, p conn.Params) (net.Conn, *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan net.Conn, 1)
	go func() {
		defer close(peer)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		b := make([]byte, conn.ParamsLen)
		if _, err := io.ReadFull(c, b); err != nil {
			_ = c.Close()
			return
		}
		_, _ = c.Write(b)
		peer <- c
	}()
	s, err := Dial(t.Context(), ln.Addr().String(), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	pc := <-peer
	if pc == nil {
		t.Fatal("the stand-in receiver did not complete the handshake")
	}
	t.Cleanup(func() { _ = pc.Close() })
	return pc, s
}

// TestOversizeControl checks that a sender fails the connection on a
// message longer than its receive buffers (conn.MaxControl bytes), without
// reading it.
func TestOversizeControl(t *testing.T) {
	t.Parallel()
	pc, s := rawReceiver(t, proposal)
	if _, err := pc.Write(frame(ctrlFrame|(conn.MaxControl+1), 0)); err != nil {
		t.Fatal(err)
	}
	err := pollError(t, s)
	want := fmt.Sprintf("read from %s: peer sent a %d-byte control message but its receive buffers hold %d bytes", pc.LocalAddr(), conn.MaxControl+1, conn.MaxControl)
	if conn.KindOf(err) != conn.KindIntegrity || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("poll: %v (%v), want %v: %s...", err, conn.KindOf(err), conn.KindIntegrity, want)
	}
}

// TestFailuresReachPoll checks that a failed read and a failed write each
// fail the connection, so that Poll reports them with the peer's address.
func TestFailuresReachPoll(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		breakIt func(t *testing.T, peer net.Conn, c *Conn)
		want    string // with %s for the peer's address
	}{
		{"peer closes", func(t *testing.T, peer net.Conn, c *Conn) {
			_ = peer.Close()
		}, "read from %s: peer closed the connection"},
		{"peer resets", func(t *testing.T, peer net.Conn, c *Conn) {
			_ = peer.(*net.TCPConn).SetLinger(0)
			_ = peer.Close()
		}, "read from %s: read tcp"},
		{"write fails", func(t *testing.T, peer net.Conn, c *Conn) {
			_ = c.nc.(*net.TCPConn).CloseWrite()
			if err := c.SendControl(t.Context(), []byte{1}); err != nil {
				t.Fatal(err)
			}
		}, "write to %s: writev tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			peer, r := rawSender(t)
			tt.breakIt(t, peer, r.(*Conn))
			err := pollError(t, r)
			want := strings.Replace(tt.want, "%s", peer.LocalAddr().String(), 1)
			if conn.KindOf(err) != conn.KindAborted || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("poll: %v (%v), want %v: %s...", err, conn.KindOf(err), conn.KindAborted, want)
			}
			if err := r.PostRecv(0); err == nil {
				t.Error("post receive on a failed connection succeeded")
			}
		})
	}
}
