package rdma

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestWindow checks that a receiver spends nothing of a stream's size, and
// exposes no memory to remote writes, before the engine opens its window
// (after authentication and the claim): it pins less than one chunk, its
// buffers are registered for local access only, and data cannot be sent
// yet. Once open, only the ring is writable, under a key of its own.
func TestWindow(t *testing.T) {
	p := conn.NewParams(1<<20, 4)
	l := listenRXE(t, p, DefaultOptions())
	s, r, err, aerr := connect(timeout(t, 20*time.Second), l, Dialer{Options: DefaultOptions()}, p)
	if err != nil || aerr != nil {
		t.Fatalf("Dial: %v; Accept: %v", err, aerr)
	}
	t.Cleanup(func() { s.Close(); r.Close() })
	snd, rcv := s.(*Conn), r.(*Conn)
	window := int64(p.Credits() * p.Chunk)
	before := rcv.Info().Pinned
	if before >= int64(p.Chunk) && !iwarp() || before >= int64(conn.SpareRecvs+1)*int64(p.Chunk) {
		t.Errorf("receiver pins %d bytes before its window opens", before)
	}
	if err := snd.PostSend(0, 10); conn.KindOf(err) != conn.KindInternal || !strings.Contains(err.Error(), "window is not known") {
		t.Errorf("PostSend before the window is known: %v, want a KindInternal error", err)
	}
	if err := rcv.PostRecv(0); conn.KindOf(err) != conn.KindInternal || !strings.Contains(err.Error(), "not open") {
		t.Errorf("PostRecv of a window buffer before it is open: %v, want a KindInternal error", err)
	}
	desc, err := rcv.OpenWindow()
	if err != nil {
		t.Fatal(err)
	}
	if again, err := rcv.OpenWindow(); err != nil || !bytes.Equal(again, desc) || rcv.Info().Pinned != before+int64(len(rcv.win.mem)) {
		t.Errorf("a second OpenWindow: %x, %v, pinned %d; want the same description and nothing new", again, err, rcv.Info().Pinned)
	}
	if got := rcv.Info().Pinned - before; got < window {
		t.Errorf("opening the window pinned %d bytes, want at least %d", got, window)
	}
	if err := snd.SetWindow(desc); err != nil {
		t.Fatal(err)
	}
	if iwarp() {
		if len(desc) != 0 {
			t.Errorf("SEND data path: the window is described in %d bytes, want none", len(desc))
		}
		stream(t, snd, rcv, 3*p.Depth, func(i int) int { return 1 + i*4099 })
		return
	}
	if snd.ring.rkey == uint32(rcv.bufs.mr.rkey) {
		t.Error("the ring shares the key of the receiver's other buffers")
	}
	stream(t, snd, rcv, 3*p.Depth, func(i int) int { return 1 + i*4099 })
}

// TestWindowKeys aims a sender's write at one of the receiver's spares (a
// control buffer) over their connection: it fails under the ring's key,
// which covers the ring only, and under the key of the region the spare is
// in, which allows no remote writes; the spare is untouched.
func TestWindowKeys(t *testing.T) {
	if iwarp() {
		t.Skip("iWARP has no ring: nothing is remotely writable")
	}
	p := conn.NewParams(4096, 4)
	for _, tc := range []struct {
		name string
		key  func(snd, rcv *Conn) uint32
	}{
		{"the ring's key", func(snd, rcv *Conn) uint32 { return snd.ring.rkey }},
		{"the other buffers' key", func(snd, rcv *Conn) uint32 { return uint32(rcv.bufs.mr.rkey) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, r := pair(t, p, p, DefaultOptions())
			snd, rcv := s.(*Conn), r.(*Conn)
			spare := rcv.bufs.recv[p.Credits()]
			copy(spare, "spare")
			key := tc.key(snd, rcv)
			snd.ring = &ring{addr: uint64(uintptr(unsafe.Pointer(&spare[0]))), rkey: key, rkeys: []uint32{key},
				stride: 4096, slots: 1, lanes: 1}
			copy(snd.bufs.send[0], "overwritten")
			if err := snd.PostSend(0, 11); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cs := make([]conn.Completion, 4)
			n, err := snd.Poll(ctx, cs)
			if err == nil {
				t.Fatalf("the write completed: %+v", cs[:n])
			}
			t.Logf("sender: %v", err)
			if string(spare[:5]) != "spare" {
				t.Fatalf("the spare now holds %q", spare[:11])
			}
		})
	}
}
