package cp

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/plan"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/tcp"
)

// notesWriter collects a sender's -v notes and signals each "connecting
// again" on again.
type notesWriter struct {
	mu    sync.Mutex
	b     strings.Builder
	again chan struct{}
}

func (w *notesWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if bytes.Contains(p, []byte("connecting again")) {
		select {
		case w.again <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// TestStreamRetries makes the first attempt of the local side fail before
// its stream starts, as a brief flood or a race would (the port not open
// yet, the connection reset, the handshake dropped), and only then starts
// the real remote side: the copy must get through.
func TestStreamRetries(t *testing.T) {
	params := conn.NewParams(4096, 4)
	cases := []struct {
		name string
		// first makes the first attempt at addr fail (without waiting for
		// it) and returns the listener the real remote side then uses, or
		// nil for a new one.
		first func(t *testing.T, ctx context.Context, addr string) conn.Listener
	}{
		{"refused", func(t *testing.T, ctx context.Context, addr string) conn.Listener { return nil }},
		{"reset", func(t *testing.T, ctx context.Context, addr string) conn.Listener {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				c, err := ln.Accept()
				ln.Close()
				if err == nil {
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
				}
			}()
			return nil
		}},
		{"dropped in the handshake", func(t *testing.T, ctx context.Context, addr string) conn.Listener {
			l, err := tcp.Listen(ctx, addr, params)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				if c, err := l.Accept(ctx); err == nil {
					c.Close()
				}
			}()
			return l
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			port, err := freeTCPPort("127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			src := filepath.Join(t.TempDir(), "src")
			if err := os.WriteFile(src, []byte("the real stream"), 0o644); err != nil {
				t.Fatal(err)
			}
			p, in, err := plan.Open([]string{src}, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			key := proto.NewKey()
			notes := &notesWriter{again: make(chan struct{}, 1)}
			o := Options{Transport: "tcp", Timeout: time.Minute, Verbose: true, Stderr: notes}
			l := tc.first(t, ctx, addr)
			sent := make(chan error, 1)
			go func() {
				_, err := stream(ctx, addr, p, in, o, o.sendConfig(key), nil)
				sent <- err
			}()
			select {
			case <-notes.again:
			case err := <-sent:
				t.Fatalf("the sender gave up after one attempt: %v", err)
			}
			if l == nil {
				if l, err = tcp.Listen(ctx, addr, params); err != nil {
					t.Fatal(err)
				}
			}
			defer l.Close()
			var out bytes.Buffer
			srv := server.Server{Listener: l, Out: &out, Config: pipe.ReceiveConfig{Key: key, Timeout: time.Minute}, Log: io.Discard, Wait: time.Minute}
			if _, err := srv.Serve(ctx); err != nil {
				t.Fatalf("receiver: %v", err)
			}
			if err := <-sent; err != nil || out.String() != "the real stream" {
				t.Fatalf("sender: %v; received %q", err, out.String())
			}
		})
	}
}
