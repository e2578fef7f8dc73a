package pipe

import (
	"strconv"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// FuzzMessageDecoders feeds arbitrary bytes to every decoder of a peer's
// message headers and aborts: none may panic, and an abort's reason must
// come out quoted, with no raw control byte that could reach a terminal.
func FuzzMessageDecoders(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("payloadD\x00\x00\x00\x01\x00\x00\x00"))
	f.Add([]byte{byte(conn.KindIntegrity), 0x1b, '[', '2', 'J'})
	f.Add(abortMessage([]byte{msgAbort}, conn.KindBusy, "busy", 0)[1:])
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _, _ = parseTrailer(b)
		k, reason := parseAbort(b)
		for _, authed := range []bool{false, true} {
			switch peerKind(k, authed) {
			case conn.KindSetup, conn.KindBusy, conn.KindAuth, conn.KindAborted, conn.KindIntegrity:
			default:
				t.Errorf("peerKind(%d, %v) = %v: a peer may not choose that", k, authed, peerKind(k, authed))
			}
		}
		if _, err := strconv.Unquote(reason); err != nil && len(b) > 0 {
			t.Errorf("reason %s is not a quoted string: %v", reason, err)
		}
		for _, r := range reason {
			if r < 0x20 || r == 0x7f {
				t.Errorf("reason %q carries a raw control byte", reason)
			}
		}
		if d := describe(b); len(d) > 128 {
			t.Errorf("describe returned %d bytes: unbounded", len(d))
		}
	})
}

func TestCreditBatch(t *testing.T) {
	cases := []struct{ chunk, credits, want int }{
		{4 << 20, 7, 1},     // large chunks: one credit per message
		{1 << 20, 127, 1},   // a chunk is all a batch may hold back
		{64 << 10, 7, 1},    // a shallow window keeps every credit moving
		{64 << 10, 127, 16}, // 1 MiB of 64 KiB chunks
		{4096, 63, 15},      // a quarter of the window
		{1, 3, 1},
	}
	for _, c := range cases {
		if got := creditBatch(c.chunk, c.credits); got != c.want {
			t.Errorf("creditBatch(%d, %d) = %d, want %d", c.chunk, c.credits, got, c.want)
		}
	}
}
