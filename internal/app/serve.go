package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"

	"github.com/schollz/progressbar/v3"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// maxHandshakes is how many senders a receiver handshakes with at once. A
// connection that says nothing cannot hold a real sender up: the two
// handshake side by side, the real one claims the receiver, and when more
// connect, the one waiting longest is dropped.
const maxHandshakes = 8

// server serves the senders that connect to a receiver's listener: it
// handshakes with each (several at once), streams the first to claim the
// receiver to out, and, with keep, goes on with the next ones.
type server struct {
	l    pipe.Listener
	o    options
	out  io.Writer
	keep bool
	log  io.Writer

	serving atomic.Bool // a sender has claimed the receiver
	results chan served
}

// served is how one connection ended.
type served struct {
	p   *pending
	st  pipe.Stats
	err error
}

// pending is a connection in its handshake, or the claimed one.
type pending struct {
	conn   pipe.Conn
	cancel context.CancelFunc
	state  atomic.Int32 // handshaking, claimed or dropped
}

const (
	handshaking int32 = iota
	claimed
	dropped
)

// run serves senders until the stream ends (or, with keep, until ctx ends).
//
// Exit status: without keep, that of the one stream served, the one
// sender that claimed the receiver; connections that fail before that
// (not rdmapipe, silent, wrong version, wrong or missing key, a relay
// that could not be set up) are logged, at most RefusalBurst a second,
// and skipped. With keep, that of the last
// stream served (0 if none), or the interruption if a signal cut a stream.
// A failure of this host's resources (memlock) ends the receiver unless keep.
func (s *server) run(ctx context.Context) error {
	s.results = make(chan served)
	accepted := make(chan pipe.Conn)
	acceptErrs := make(chan error)
	actx, stopAccepting := context.WithCancel(ctx)
	defer stopAccepting()
	go pipe.AcceptLoop(actx, s.l, accepted, acceptErrs)

	var waiting []*pending // handshaking, oldest first
	inFlight := 0
	defer func() {
		stopAccepting()
		for _, p := range waiting {
			p.drop()
		}
		for ; inFlight > 0; inFlight-- {
			<-s.results
		}
	}()
	var last error
	refused := Refusals{W: s.log, Prog: "rdmarecv"}
	done := ctx.Done()
	for {
		select {
		case conn := <-accepted:
			if len(waiting) == maxHandshakes {
				waiting[0].drop()
				waiting = waiting[1:]
			}
			p := s.start(ctx, conn)
			waiting = append(waiting, p)
			inFlight++
		case err := <-acceptErrs:
			refused.Log(err)
			if errors.Is(err, pipe.ErrLocal) && !s.keep && !s.serving.Load() {
				return err
			}
		case r := <-s.results:
			inFlight--
			waiting = remove(waiting, r.p)
			if r.p.state.Load() != claimed {
				if errors.Is(r.err, pipe.ErrProbe) {
					if s.o.verbose {
						fmt.Fprintf(s.log, "rdmarecv: %s checked the connection (rdmasend --check); waiting for a stream\n", r.p.conn.Info().Remote)
					}
					continue
				}
				if r.err != nil && ctx.Err() == nil {
					refused.Log(r.err)
				}
				continue
			}
			err := finish(s.o, "recv", r.st, r.err)
			s.serving.Store(false)
			s.l.SetBusy(false)
			if !s.keep || errors.Is(r.err, pipe.ErrStuck) || errors.Is(err, syscall.EPIPE) {
				return err
			}
			last = err
			if ctx.Err() != nil {
				return err
			}
			if err != nil {
				fmt.Fprintf(s.log, "rdmarecv: %v (waiting for the next sender)\n", err)
			}
		case <-done:
			if s.serving.Load() {
				done = nil // the stream in progress ends with the interruption
				continue
			}
			if s.keep {
				return last
			}
			return context.Cause(ctx)
		}
	}
}

// start handshakes with the sender on conn in a goroutine and, if it
// claims the receiver, streams it to out; the outcome goes to s.results.
func (s *server) start(ctx context.Context, conn pipe.Conn) *pending {
	hctx, cancel := context.WithCancel(ctx)
	p := &pending{conn: conn, cancel: cancel}
	cfg := s.o.cfg
	stopStats := func() {}
	if s.o.statsEvery > 0 {
		cfg.Gauges = &pipe.Gauges{}
	}
	cfg.Claim = func() bool {
		if !p.state.CompareAndSwap(handshaking, claimed) {
			return false
		}
		if !s.serving.CompareAndSwap(false, true) {
			p.state.Store(handshaking)
			return false
		}
		s.l.SetBusy(true)
		stopStats = startStats(s.o, s.log, "rdmarecv", "recv", cfg.Gauges)
		return true
	}
	cfg.Unclaim = func() {
		stopStats()
		stopStats = func() {}
		s.l.SetBusy(false)
		s.serving.Store(false)
		p.state.Store(handshaking)
	}
	var bar *progressbar.ProgressBar // made when the claimed stream's data flows
	if s.o.progress {
		var update func(int64)
		cfg.Progress = func(n int64) {
			if bar == nil {
				bar = newProgress(s.log, -1, "receiving")
				update = progressUpdater(bar, "receiving")
			}
			update(n)
		}
	}
	go func() {
		defer cancel()
		st, err := pipe.Receive(hctx, conn, s.out, cfg)
		stopStats()
		if !errors.Is(err, pipe.ErrStuck) { // else the process exits with the buffers mapped
			conn.Close()
		}
		if bar != nil && !errors.Is(err, pipe.ErrStuck) {
			_ = bar.Finish()
		}
		s.results <- served{p: p, st: st, err: err}
	}()
	return p
}

// drop gives up a connection still in its handshake (a claimed one stays).
func (p *pending) drop() {
	if p.state.CompareAndSwap(handshaking, dropped) {
		p.cancel()
	}
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
