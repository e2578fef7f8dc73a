package sendrecv

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
)

// dropper is a conn.Dialer over in-memory pairs to a receiver that closes
// the first drops connections in their handshake, once the sender has
// proved the key and before the welcome (as a receiver under a flood may
// drop a sender in its handshake), and streams the next ones to out, each
// connection cut at its message cutAt (0: never).
type dropper struct {
	ctx          context.Context // the receivers'
	drops, cutAt int
	cfg          pipe.ReceiveConfig
	dials        atomic.Int32
	out          testutil.Buffer
	received     chan error
}

func (d *dropper) Dial(_ context.Context, addr string, proposal conn.Params) (conn.Conn, error) {
	s, r, err := memconn.Pair(proposal, proposal, memconn.Faults{CutAt: d.cutAt})
	if err != nil {
		return nil, err
	}
	cfg := d.cfg
	if int(d.dials.Add(1)) <= d.drops {
		cfg.Claim = func() bool { r.Close(); return false }
	}
	go func() {
		_, err := pipe.Receive(d.ctx, r, &d.out, cfg)
		r.Close()
		d.received <- err
	}()
	return s, nil
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestSendWithRetry checks what --wait retries: a connection the receiver
// closed before its welcome is tried again and the stream arrives whole;
// without --wait it is not; and a stream cut after it began to read its
// input is never tried again (the input cannot be replayed).
func TestSendWithRetry(t *testing.T) {
	key := bytes.Repeat([]byte{5}, 32)
	in := bytes.Repeat([]byte("the one stream that must arrive whole "), 30000)
	tests := []struct {
		name         string
		drops, cutAt int
		wait         time.Duration
		dials        int32
		ok           bool
	}{
		{"closed before the welcome, with --wait", 2, 0, time.Minute, 3, true},
		{"closed before the welcome, without --wait", 1, 0, 0, 1, false},
		{"cut after the stream began, with --wait", 0, 40, time.Minute, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := pipe.ReceiveConfig{Key: key, Timeout: time.Minute}
			d := &dropper{ctx: t.Context(), drops: tt.drops, cutAt: tt.cutAt, cfg: cfg, received: make(chan error, tt.dials+1)}
			p := conn.NewParams(4096, 4)
			r := &countingReader{r: bytes.NewReader(in)}
			st, _, err := sendWithRetry(t.Context(), d, "mem", p, tt.wait, r, pipe.SendConfig{Key: cfg.Key, Timeout: cfg.Timeout})
			if n := d.dials.Load(); n != tt.dials {
				t.Errorf("%d connections, want %d", n, tt.dials)
			}
			if !tt.ok {
				if err == nil {
					t.Fatalf("sent with no error, want a failure")
				}
				if tt.cutAt > 0 && (!st.Began || r.n.Load() == 0) {
					t.Errorf("Began %v after reading %d bytes, want a stream that began", st.Began, r.n.Load())
				}
				return
			}
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			served := 0
			for range tt.dials {
				if err := <-d.received; err == nil {
					served++
				}
			}
			if served != 1 {
				t.Errorf("%d receivers served the stream, want the last one only", served)
			}
			if !bytes.Equal(d.out.Bytes(), in) {
				t.Errorf("received %d bytes, want the %d sent", d.out.Len(), len(in))
			}
		})
	}
}
