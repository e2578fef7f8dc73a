package cp

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/app"
	"github.com/rdmapipe/rdmapipe/pipe"
)

// maxHandshakes bounds the connections the remote side handshakes with at
// once. When another arrives, the one that has waited longest in its
// handshake is dropped, so that connections that say nothing cannot lock
// the real sender out: it handshakes beside them, proves the key and
// claims the receiver. Only the one holding the one-time key gets past
// the handshake.
const maxHandshakes = 8

// pending is a connection in its handshake, or the claimed one.
type pending struct {
	cancel context.CancelFunc
	state  atomic.Int32 // handshaking, claimed or dropped
}

const (
	handshaking int32 = iota
	claimed
	dropped
)

// drop gives up a connection still in its handshake (a claimed one stays).
func (p *pending) drop() {
	if p.state.CompareAndSwap(handshaking, dropped) {
		p.cancel()
	}
}

// result is how one connection ended.
type result struct {
	p   *pending
	st  pipe.Stats
	err error
}

// receiveOne accepts connections on l until one proves the key and claims
// the receiver, writes its stream to w, and returns how it ended. No sender
// claiming within wait is a setup failure. Connections that fail the
// handshake are reported on log (at most app.RefusalBurst a second) and
// skipped; dropped ones are not reported.
func receiveOne(ctx context.Context, l pipe.Listener, w io.Writer, cfg pipe.Config, wait time.Duration, log io.Writer) (pipe.Stats, error) {
	actx, stopAccepting := context.WithCancel(ctx)
	accepted, acceptErrs := make(chan pipe.Conn), make(chan error)
	var wg sync.WaitGroup
	wg.Go(func() { pipe.AcceptLoop(actx, l, accepted, acceptErrs) })
	results := make(chan result)
	var waiting []*pending // handshaking, oldest first
	inFlight := 0
	defer func() {
		stopAccepting()
		for _, p := range waiting {
			p.drop()
		}
		for ; inFlight > 0; inFlight-- {
			<-results
		}
		wg.Wait()
	}()
	refused := app.Refusals{W: log, Prog: "rdmacp"}
	var won atomic.Bool // a sender has claimed the receiver
	timer := time.NewTimer(wait)
	defer timer.Stop()
	done := ctx.Done()
	for {
		select {
		case c := <-accepted:
			if len(waiting) == maxHandshakes {
				waiting[0].drop()
				waiting = waiting[1:]
			}
			waiting = append(waiting, start(ctx, c, w, cfg, &won, l, results))
			inFlight++
		case err := <-acceptErrs:
			refused.Log(err)
		case r := <-results:
			inFlight--
			waiting = remove(waiting, r.p)
			switch r.p.state.Load() {
			case claimed:
				return r.st, r.err
			case handshaking:
				if r.err != nil && ctx.Err() == nil {
					refused.Log(r.err)
				}
			}
		case <-done:
			if won.Load() {
				done = nil // the stream in progress ends with the cancellation
				continue
			}
			return pipe.Stats{}, pipe.Errorf(pipe.KindAborted, "wait for the sender", "%v", context.Cause(ctx))
		case <-timer.C:
			if !won.Load() {
				return pipe.Stats{}, pipe.Errorf(pipe.KindSetup, "wait for the sender", "no sender proved the key within %v", wait)
			}
		}
	}
}

// start handshakes with the sender on c in a goroutine; if it is the
// first to claim the receiver, it streams it to w. The outcome goes to
// results.
func start(ctx context.Context, c pipe.Conn, w io.Writer, cfg pipe.Config, won *atomic.Bool, l pipe.Listener, results chan<- result) *pending {
	hctx, cancel := context.WithCancel(ctx)
	p := &pending{cancel: cancel}
	cfg.Claim = func() bool {
		if !p.state.CompareAndSwap(handshaking, claimed) {
			return false
		}
		if !won.CompareAndSwap(false, true) {
			p.state.Store(handshaking)
			return false
		}
		l.SetBusy(true)
		return true
	}
	go func() {
		defer cancel()
		st, err := pipe.Receive(hctx, c, w, cfg)
		if !errors.Is(err, pipe.ErrStuck) { // else the process exits with the buffers mapped
			c.Close()
		}
		results <- result{p, st, err}
	}()
	return p
}

// remove returns ps without p.
func remove(ps []*pending, p *pending) []*pending {
	for i, q := range ps {
		if q == p {
			return append(ps[:i], ps[i+1:]...)
		}
	}
	return ps
}
