// Package server is the one accept loop of a receiver, rdmarecv's and
// rdmacp's remote side: "claim first". It handshakes with several
// connections at once, streams the first that authenticates itself and
// claims the receiver, and never lets one that does not end it or hold
// the real sender up.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/admit"
)

// handshakePolicy returns the policy for the connections a Server handshakes
// with at once (see admit.Policy). A connection that says nothing cannot lock
// the real sender out: the two handshake side by side, and the real one
// progresses, proving the key and claiming the receiver, which no
// newcomer can undo. A flood from one host recycles that host's 32
// slots, oldest first, so each of its connections lasts as long as it
// takes to open 32 more; beyond 64 in all, a host that already holds one
// is refused at random, more often as the 128 fill.
func handshakePolicy() admit.Policy {
	return admit.Policy{PerSource: 32, Start: 64, Full: 128, Rate: 0.3}
}

// MaxHandshakes is how many connections that arrive while a stream with
// Rejoin is served wait for it (see Server.Rejoin).
const MaxHandshakes = 8

// Server serves the senders that connect to Listener. Its zero value but
// for Listener, Out, Log and Prog serves one stream.
type Server struct {
	Listener conn.Listener
	// Out is where streams are written.
	Out io.Writer
	// Config is each connection's engine configuration; Claim and
	// Unclaim are the Server's.
	Config pipe.Config
	// Log takes the refused connections, at most RefusalBurst lines a
	// second, each prefixed with Prog.
	Log  io.Writer
	Prog string
	// Keep serves the next sender when a stream ends, until the context
	// ends.
	Keep bool
	// Wait, if not 0, bounds the wait for a sender to claim the receiver.
	Wait time.Duration
	// Attach, if set, is called for each connection before its handshake:
	// it may add to its configuration (progress, gauges) and returns what
	// to call when the connection claims the receiver and when its stream
	// ends.
	Attach func(cfg *pipe.Config) Hooks
	// Served, if set, is told how each claimed stream ended and returns
	// the error that stands for it (for the exit status), and whether a
	// Server with Keep may serve another.
	Served func(st pipe.Stats, err error) (result error, more bool)
	// Probed, if set, is told of each sender that only checked the
	// connection (pipe.ErrProbe).
	Probed func(remote string)
	// Rejoin lets a claimed stream whose sender was lost take a
	// replacement from Listener (see pipe.Config.Rejoin; it needs a
	// key): while it waits for one, the listener is not busy, and the
	// connections that arrive go to it, one at a time, instead of
	// handshaking on their own. Those that arrive while the stream is
	// served and not waiting (the replacement may come before the
	// stream has noticed its loss) wait for it, at most MaxHandshakes,
	// the oldest closed first; when the stream ends they handshake as
	// usual (with Keep) or are closed.
	Rejoin bool
}

// handover is a claimed stream's wait for a replacement sender: the next
// connection accepted goes to it, unless it gave up waiting first.
type handover struct {
	mu    sync.Mutex
	c     conn.Conn
	gone  bool          // the stream gave up waiting
	ready chan struct{} // closed once c is set
}

// give hands c over and reports whether the waiter took it.
func (h *handover) give(c conn.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return false
	}
	h.c = c
	close(h.ready)
	return true
}

// rejoin is pipe.Config.Rejoin for a Server's claimed stream: it asks the
// accept loop, through asks, for the next connection.
func rejoin(asks chan<- *handover) func(ctx context.Context) (conn.Conn, error) {
	return func(ctx context.Context) (conn.Conn, error) {
		h := &handover{ready: make(chan struct{})}
		select {
		case asks <- h:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		select {
		case <-h.ready:
			return h.c, nil
		case <-ctx.Done():
			h.mu.Lock()
			defer h.mu.Unlock()
			h.gone = true
			if h.c != nil {
				return h.c, nil // handed over meanwhile: the engine closes it
			}
			return nil, context.Cause(ctx)
		}
	}
}

// Hooks are a command's part in one connection (see Server.Attach).
type Hooks struct {
	Claimed   func() // the connection claimed the receiver
	Unclaimed func() // it gave the claim back before its stream began
	// Ended is called when the claimed stream ended; stuck says that its
	// reader or writer may still be busy (see pipe.ErrStuck).
	Ended func(stuck bool)
}

// pending is a connection in its handshake, or the claimed one.
type pending struct {
	c      conn.Conn
	cancel context.CancelCauseFunc
	state  atomic.Int32 // handshaking, claimed or dropped
}

const (
	handshaking int32 = iota
	claimed
	dropped
)

// served is how one connection ended.
type served struct {
	p   *pending
	st  pipe.Stats
	err error
}

// Serve serves senders until a stream ends, or with Keep until ctx ends.
//
// Without Keep it returns the one stream served: its Stats and the error
// Served made of its outcome. Connections that fail before claiming the
// receiver (not rdmapipe, silent, wrong version, wrong or missing key, a
// relay that could not be set up) are logged and skipped. With Keep it
// returns the last stream's outcome (nil if none) once ctx ends, and ends
// early only when Served says so or a stream's reader or writer is stuck.
// A failure of this host's resources (conn.ErrLocal) ends it unless Keep or
// a stream is in progress; no claim within Wait is a conn.KindSetup error, and
// ctx ending before any a conn.KindAborted one that wraps its cause.
func (s *Server) Serve(ctx context.Context) (pipe.Stats, error) {
	results := make(chan served)
	accepted, acceptErrs := make(chan conn.Conn), make(chan error)
	actx, stopAccepting := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		acceptLoop(actx, s.Listener, accepted, acceptErrs)
	}()
	waiting := newHandshakes() // handshaking or claimed
	inFlight := 0
	defer func() {
		stopAccepting()
		for _, p := range waiting.values() {
			p.drop(nil)
		}
		for ; inFlight > 0; inFlight-- {
			<-results
		}
		<-loopDone
	}()
	var serving atomic.Bool // a sender has claimed the receiver
	refused := Refusals{W: s.Log, Prog: s.Prog}
	var wait <-chan time.Time
	if s.Wait > 0 {
		timer := time.NewTimer(s.Wait)
		defer timer.Stop()
		wait = timer.C
	}
	var last served
	done := ctx.Done()
	asks := make(chan *handover)
	var asked *handover   // a claimed stream's wait for a replacement sender
	var lobby []conn.Conn // connections that came while the stream was served, oldest first
	defer func() {
		for _, c := range lobby {
			c.Close()
		}
	}()
	for {
		select {
		case h := <-asks:
			if len(lobby) > 0 && h.give(lobby[0]) {
				lobby = lobby[1:]
				continue
			}
			asked = h
			s.Listener.SetBusy(false)
		case c := <-accepted:
			if asked != nil {
				taken := asked.give(c)
				asked = nil
				s.Listener.SetBusy(serving.Load())
				if taken {
					continue
				}
			}
			if s.Rejoin && serving.Load() {
				if lobby = append(lobby, c); len(lobby) > MaxHandshakes {
					lobby[0].Close()
					lobby = lobby[1:]
				}
				continue
			}
			if p := waiting.arrive(c); p != nil {
				s.start(ctx, p, waiting, &serving, results, asks)
				inFlight++
			}
		case err := <-acceptErrs:
			refused.Log(err)
			if errors.Is(err, conn.ErrLocal) && !s.Keep && !serving.Load() {
				return pipe.Stats{}, err
			}
		case r := <-results:
			inFlight--
			waiting.leave(r.p)
			if r.p.state.Load() != claimed {
				switch {
				case errors.Is(r.err, pipe.ErrProbe):
					if s.Probed != nil {
						s.Probed(r.p.c.Info().Remote)
					}
				case r.err != nil && ctx.Err() == nil:
					refused.Log(r.err)
				}
				continue
			}
			wait, asked = nil, nil
			err, more := r.err, true
			if s.Served != nil {
				err, more = s.Served(r.st, r.err)
			}
			serving.Store(false)
			s.Listener.SetBusy(false)
			last = served{st: r.st, err: err}
			if !s.Keep || !more || errors.Is(r.err, pipe.ErrStuck) || ctx.Err() != nil {
				return r.st, err
			}
			for _, c := range lobby { // the next senders, perhaps
				if p := waiting.arrive(c); p != nil {
					s.start(ctx, p, waiting, &serving, results, asks)
					inFlight++
				}
			}
			lobby = nil
			if err != nil {
				fmt.Fprintf(s.Log, "%s: %v (waiting for the next sender)\n", s.Prog, err)
			}
		case <-wait:
			return pipe.Stats{}, conn.Errorf(conn.KindSetup, "wait for the sender", "no sender claimed the receiver within %v", s.Wait)
		case <-done:
			if serving.Load() {
				done = nil // the stream in progress ends with the cancellation
				continue
			}
			if s.Keep {
				return last.st, last.err
			}
			return pipe.Stats{}, &conn.Error{Kind: conn.KindAborted, Op: "wait for the sender", Err: context.Cause(ctx)}
		}
	}
}

// start handshakes with the sender of p in a goroutine and, if it claims
// the receiver (progressing in waiting), streams it to s.Out; the outcome
// goes to results, and a wait for a replacement sender (with Rejoin) to
// asks.
func (s *Server) start(ctx context.Context, p *pending, waiting *handshakes, serving *atomic.Bool, results chan<- served, asks chan<- *handover) {
	hctx, cancel := context.WithCancelCause(ctx)
	p.cancel = cancel
	c := p.c
	cfg := s.Config
	if s.Rejoin {
		cfg.Rejoin = rejoin(asks)
	}
	var h Hooks
	if s.Attach != nil {
		h = s.Attach(&cfg)
	}
	cfg.Claim = func() bool {
		if !p.state.CompareAndSwap(handshaking, claimed) {
			return false
		}
		if !serving.CompareAndSwap(false, true) {
			p.state.Store(handshaking)
			return false
		}
		s.Listener.SetBusy(true)
		waiting.progress(p)
		if h.Claimed != nil {
			h.Claimed()
		}
		return true
	}
	cfg.Unclaim = func() {
		if h.Unclaimed != nil {
			h.Unclaimed()
		}
		s.Listener.SetBusy(false)
		serving.Store(false)
		p.state.Store(handshaking)
	}
	go func() {
		defer cancel(nil)
		st, err := pipe.Receive(hctx, c, s.Out, cfg)
		stuck := pipe.Release(c, err)
		if p.state.Load() == claimed && h.Ended != nil {
			h.Ended(stuck)
		}
		results <- served{p: p, st: st, err: err}
	}()
}

// drop gives up a connection still in its handshake (a claimed one
// stays), for cause, which its handshake fails with (nil: interrupted).
func (p *pending) drop(cause error) {
	if p.state.CompareAndSwap(handshaking, dropped) {
		p.cancel(cause)
	}
}

// errDropped is why a Server drops a connection in its handshake for a
// newer one (see handshakePolicy); the sender, told so, may retry.
var errDropped = conn.Errorf(conn.KindBusy, "handshake", "dropped for a newer connection: too many connections in their handshake")

// handshakes are a Server's connections in their handshake, and the
// claimed one, under its handshakePolicy. Serve's loop enters and
// removes them; a claim, in its handshake's goroutine, progresses one.
type handshakes struct {
	mu sync.Mutex
	t  *admit.Table[*pending]
}

func newHandshakes() *handshakes {
	return &handshakes{t: admit.NewTable[*pending](handshakePolicy(), rand.Float64)}
}

// arrive returns the pending handshake of c, dropping the one the policy
// drops for it, or nil, having closed c, when the policy refuses it.
func (h *handshakes) arrive(c conn.Conn) *pending {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := &pending{c: c}
	victim, drop, ok := h.t.Arrive(source(c.Info().Remote), p)
	if drop {
		victim.drop(errDropped)
	}
	if !ok {
		c.Close()
		return nil
	}
	return p
}

func (h *handshakes) progress(p *pending) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t.Progress(p)
}

func (h *handshakes) leave(p *pending) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t.Leave(p)
}

func (h *handshakes) values() []*pending {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.t.Values()
}

// source names the host of a peer address, for the handshakePolicy.
func source(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}
