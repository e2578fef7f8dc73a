package cp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// maxHandshakes bounds the connections the remote side handshakes with at
// once; more are closed at once. Only the one holding the one-time key
// gets past the handshake; the others fail it within the handshake timeout.
const maxHandshakes = 8

// result is how the stream of the claimed connection ended.
type result struct {
	st  pipe.Stats
	err error
}

// receiveOne accepts connections on l until one proves the key and claims
// the receiver, writes its stream to w, and returns how it ended. No sender
// claiming within wait is a setup failure. Connections that fail the
// handshake are reported on log and skipped.
func receiveOne(ctx context.Context, l pipe.Listener, w io.Writer, cfg pipe.Config, wait time.Duration, log io.Writer) (pipe.Stats, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var claimed atomic.Bool
	results := make(chan result, 1)
	slots := make(chan struct{}, maxHandshakes)
	accepted, acceptErrs := make(chan pipe.Conn), make(chan error)
	wg.Go(func() { pipe.AcceptLoop(ctx, l, accepted, acceptErrs) })
	wg.Go(func() {
		for {
			var c pipe.Conn
			select {
			case c = <-accepted:
			case err := <-acceptErrs:
				fmt.Fprintf(log, "rdmacp: refused a connection: %v\n", err)
				continue
			case <-ctx.Done():
				return
			}
			select {
			case slots <- struct{}{}:
			default:
				c.Close()
				continue
			}
			wg.Go(func() {
				defer func() { <-slots }()
				serveOne(ctx, c, w, cfg, &claimed, l, results, log)
			})
		}
	})
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case r := <-results:
			return r.st, r.err
		case <-ctx.Done():
			if claimed.Load() { // the stream ends with the cancellation
				r := <-results
				return r.st, r.err
			}
			return pipe.Stats{}, pipe.Errorf(pipe.KindAborted, "wait for the sender", "%v", context.Cause(ctx))
		case <-timer.C:
			if !claimed.Load() {
				return pipe.Stats{}, pipe.Errorf(pipe.KindSetup, "wait for the sender", "no sender proved the key within %v", wait)
			}
		}
	}
}

// serveOne handshakes with the sender on c; if it is the first to claim
// the receiver, streams it to w and sends the outcome to results.
func serveOne(ctx context.Context, c pipe.Conn, w io.Writer, cfg pipe.Config, claimed *atomic.Bool, l pipe.Listener, results chan<- result, log io.Writer) {
	var mine atomic.Bool
	cfg.Claim = func() bool {
		if !claimed.CompareAndSwap(false, true) {
			return false
		}
		mine.Store(true)
		l.SetBusy(true)
		return true
	}
	st, err := pipe.Receive(ctx, c, w, cfg)
	if !errors.Is(err, pipe.ErrStuck) { // else the process exits with the buffers mapped
		c.Close()
	}
	if mine.Load() {
		results <- result{st, err}
		return
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(log, "rdmacp: refused a connection: %v\n", err)
	}
}
