package tcp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestPostNeverBlocks posts data and control messages to a peer that does
// not read yet. Small ones on an idle connection are written by the
// poster itself (their completions are there when PostSend returns);
// large ones (32 KiB against socket buffers of 4 KiB) fill the socket, and
// PostSend must still return at once, leaving the rest to the writer.
// Then the peer reads: every message must arrive whole and in the order
// posted, and every send must complete.
func TestPostNeverBlocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		chunk int
		ctrl  bool // a control message after each data message
		// direct: each data message is written by PostSend itself
		direct bool
	}{
		{"small, idle", 100, false, true},
		{"small with control messages", 100, true, false},
		{"large, peer not reading", 32 << 10, true, false}, // each far more than the socket takes
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := conn.NewParams(max(tt.chunk, 4096), 8)
			pc, s := rawReceiver(t, p)
			_ = s.nc.(*net.TCPConn).SetWriteBuffer(4096)
			var want [][]byte // the messages in the order posted
			posted := make(chan error, 1)
			go func() {
				for i := range s.SendBufs() {
					b := s.SendBuf(i)[:tt.chunk]
					for k := range b {
						b[k] = byte(i*31 + k)
					}
					want = append(want, append([]byte{0}, b...)) // 0: data
					if err := s.PostSend(i, tt.chunk); err != nil {
						posted <- err
						return
					}
					if tt.direct && len(s.comps) != 1 {
						t.Errorf("message %d: %d completions when PostSend returned, want 1 (written by PostSend)", i, len(s.comps))
					}
					if tt.direct {
						<-s.comps
					}
					if tt.ctrl {
						c := []byte{byte(i), 'c'}
						want = append(want, append([]byte{1}, c...)) // 1: control
						if err := s.SendControl(t.Context(), c); err != nil {
							posted <- err
							return
						}
					}
				}
				posted <- nil
			}()
			select {
			case err := <-posted:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("posting blocked while the peer did not read")
			}
			br := bufio.NewReader(pc)
			for k, w := range want {
				var h [frameHeaderLen]byte
				if _, err := io.ReadFull(br, h[:]); err != nil {
					t.Fatalf("message %d: %v", k, err)
				}
				v := binary.LittleEndian.Uint32(h[:])
				got := []byte{0}
				if v&ctrlFrame != 0 {
					got[0] = 1
				}
				body := make([]byte, v&^ctrlFrame)
				if _, err := io.ReadFull(br, body); err != nil {
					t.Fatalf("message %d: %v", k, err)
				}
				if got = append(got, body...); !bytes.Equal(got, w) {
					t.Fatalf("message %d: got %d bytes (control %v), want %d (control %v), or other bytes", k, len(got)-1, got[0] == 1, len(w)-1, w[0] == 1)
				}
			}
			if !tt.direct {
				cs := make([]conn.Completion, s.SendBufs())
				for done := 0; done < s.SendBufs(); {
					n, err := s.Poll(t.Context(), cs[:s.SendBufs()-done])
					if err != nil {
						t.Fatal(err)
					}
					done += n
				}
			}
		})
	}
}
