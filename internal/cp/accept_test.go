package cp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
)

// memListener hands out the receiver ends of in-memory pairs, in the
// order the test gives them.
type memListener struct {
	conns chan pipe.Conn
}

func (m *memListener) Accept(ctx context.Context) (pipe.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *memListener) SetBusy(bool) {}
func (m *memListener) Addr() string { return "mem" }
func (m *memListener) Close() error { return nil }

// TestFloodDropsOldest connects silent peers (they never answer the
// handshake) before the real sender: however many there are, the real
// sender gets through, since the oldest handshake is dropped to make room.
func TestFloodDropsOldest(t *testing.T) {
	for _, silent := range []int{0, maxHandshakes - 1, maxHandshakes, 4 * maxHandshakes} {
		t.Run(fmt.Sprintf("%d silent", silent), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			key := bytes.Repeat([]byte{7}, keyLen)
			p := pipe.NewParams(4096, 4)
			cfg := pipe.Config{Key: key, Timeout: time.Minute} // silent handshakes last 10 s
			l := &memListener{conns: make(chan pipe.Conn)}
			var out bytes.Buffer
			done := make(chan error, 1)
			go func() {
				_, err := receiveOne(ctx, l, &out, cfg, time.Minute, io.Discard)
				done <- err
			}()
			for range silent {
				s, r, err := memconn.Pair(p, p, memconn.Faults{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				l.conns <- r
			}
			s, r, err := memconn.Pair(p, p, memconn.Faults{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			l.conns <- r
			if _, err := pipe.Send(ctx, s, strings.NewReader("the real stream"), cfg); err != nil {
				t.Fatalf("real sender after %d silent ones: %v", silent, err)
			}
			if err := <-done; err != nil || out.String() != "the real stream" {
				t.Fatalf("receiver: %v, wrote %q", err, out.String())
			}
		})
	}
}
