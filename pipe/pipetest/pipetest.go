// Package pipetest checks a transport the way the engine uses it: the
// conn.Conn contract (package conntest), then whole streams of package pipe
// over the transport's connections. Each transport calls Run from its own
// tests.
package pipetest

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/conntest"
)

// wait bounds each stream, so that a broken transport fails the test
// instead of hanging it.
const wait = 10 * time.Second

// Run runs the contract suite, then the engine's streams, over the pairs mk
// makes.
func Run(t *testing.T, mk conntest.MakePair) {
	conntest.Run(t, mk)
	t.Run("ControlCredits", func(t *testing.T) { testControlCredits(t, mk) })
}

// input returns n bytes of a pattern that does not repeat every 256.
func input(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// testControlCredits runs the engine over the transport where the sender
// has more control messages to send at once than the receiver has spares
// (its authentication, then a chain naming one receiver with a long name,
// which takes two messages): it must wait for each control credit, and
// the stream arrive whole at both receivers.
func testControlCredits(t *testing.T, mk conntest.MakePair) {
	s1, r1 := conntest.Connect(t, mk)
	s2, r2 := conntest.Connect(t, mk)
	next := strings.Repeat("n", 255)
	in := input(300_000)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var outs [2]testutil.Buffer
	var errs [2]error
	var wg sync.WaitGroup
	relay := pipe.ReceiveConfig{Relay: pipe.RelayConfig{Allow: func(_ context.Context, next string) (string, error) { return next, nil }, Dial: func(_ context.Context, addr string) (conn.Conn, error) {
		if addr != next {
			t.Errorf("relay to %q, want the %d-byte name", addr, len(next))
		}
		return s2, nil
	}}}
	wg.Go(func() { _, errs[0] = pipe.Receive(ctx, r1, &outs[0], relay) })
	wg.Go(func() { _, errs[1] = pipe.Receive(ctx, r2, &outs[1], pipe.ReceiveConfig{}) })
	_, err := pipe.Send(ctx, s1, bytes.NewReader(in), pipe.SendConfig{Chain: []string{next}})
	wg.Wait()
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	for k := range outs {
		if errs[k] != nil {
			t.Errorf("receiver %d: %v", k, errs[k])
		}
		if !bytes.Equal(outs[k].Bytes(), in) {
			t.Errorf("receiver %d wrote %d bytes, want %d identical ones", k, len(outs[k].Bytes()), len(in))
		}
	}
}
