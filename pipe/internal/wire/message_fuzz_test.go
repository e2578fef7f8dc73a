package wire

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
	f.Add(AbortMessage([]byte{MsgAbort}, conn.KindBusy, "busy", 0)[1:])
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _, _ = ParseTrailer(b)
		k, reason := ParseAbort(b)
		for _, authed := range []bool{false, true} {
			switch PeerKind(k, authed) {
			case conn.KindSetup, conn.KindBusy, conn.KindAuth, conn.KindAborted, conn.KindIntegrity:
			default:
				t.Errorf("peerKind(%d, %v) = %v: a peer may not choose that", k, authed, PeerKind(k, authed))
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
		if d := Describe(b); len(d) > 128 {
			t.Errorf("describe returned %d bytes: unbounded", len(d))
		}
	})
}
