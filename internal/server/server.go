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
// for Listener, Out (or Open), Log and Prog serves one stream.
type Server struct {
	Listener conn.Listener
	// Out is where streams are written, one after another, unless Open
	// is set.
	Out io.Writer
	// Open, if set, gives each claimed stream an output of its own: it is
	// called once the stream's sender has claimed the receiver, and an
	// error fails that stream.
	Open func(Stream) (*Output, error)
	// Config is each connection's engine configuration; Claim and
	// Unclaim are the Server's, and with Open, Output and Sync too.
	Config pipe.ReceiveConfig
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
	Attach func(cfg *pipe.ReceiveConfig) Hooks
	// Served, if set, is told how each claimed stream ended and returns
	// the error that stands for it (for the exit status), and whether a
	// Server with Keep may serve another.
	Served func(st pipe.Stats, err error) (result error, more bool)
	// Probed, if set, is told of each sender that only checked the
	// connection (pipe.ErrProbe).
	Probed func(remote string)
	// Rejoin lets a claimed stream whose sender was lost take a
	// replacement from Listener (see pipe.ReceiveConfig.Rejoin; it needs a
	// key): while it waits for one, the listener is not busy, and the
	// connections that arrive go to it, one at a time, instead of
	// handshaking on their own. Those that arrive while the stream is
	// served and not waiting (the replacement may come before the
	// stream has noticed its loss) wait for it, at most MaxHandshakes,
	// the oldest closed first; when the stream ends they handshake as
	// usual (with Keep) or are closed.
	Rejoin bool
}

// Stream names a claimed stream to Server.Open.
type Stream struct {
	N      int64     // its number in this Serve, from 1
	Remote string    // the sender's address, as the transport gives it
	Began  time.Time // when its output was opened
}

// Output is one stream's own output (see Server.Open).
type Output struct {
	// W takes the stream's bytes; an *os.File of a regular file is
	// written as pipe.Receive writes one.
	W io.Writer
	// Commit is called once the stream is whole and verified, before it
	// is confirmed to the sender (pipe.ReceiveConfig.Sync): an error fails it.
	Commit func() error
	// End is called when the stream has ended with err and returns its
	// outcome: nil once Commit succeeded (the output holds the whole,
	// verified stream, even if the sender was gone before it was told),
	// else err, with the output's own failure.
	End func(err error) error
}

// streamOutput is a connection's own output, once Open has given it.
type streamOutput struct {
	n   int64
	out *Output
}

// open has the stream on cfg's connection, once claimed, numbered from
// streams and written to what open gives.
func (so *streamOutput) open(cfg *pipe.ReceiveConfig, open func(Stream) (*Output, error), c conn.Conn, streams *atomic.Int64) {
	cfg.Output = func() (io.Writer, error) {
		so.n = streams.Add(1)
		out, err := open(Stream{N: so.n, Remote: c.Info().Remote, Began: time.Now()})
		if err != nil {
			return nil, err
		}
		so.out = out
		return out.W, nil
	}
	cfg.Sync = func() error { return so.out.Commit() }
}

// end ends the output, if the stream had one, and returns the stream's
// outcome.
func (so *streamOutput) end(err error) error {
	if so.out == nil {
		return err
	}
	return so.out.End(err)
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

// rejoin is pipe.ReceiveConfig.Rejoin for a Server's claimed stream: it asks the
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

// served is how one connection ended: for a claimed stream, n is its
// number (0 if it never had an output of its own).
type served struct {
	p   *pending
	n   int64
	st  pipe.Stats
	err error
}

// Serve serves senders until a stream ends, or with Keep until ctx ends.
//
// Without Keep it returns the one stream served: its Stats and the error
// Served made of its outcome. Connections that fail before claiming the
// receiver (not rdmapipe, silent, wrong version, wrong or missing key, a
// relay that could not be set up) are logged and skipped. With Keep it
// returns once ctx ends: nil if every stream served was whole, else how
// many failed and the last failure. Without Open, a failed stream ends it
// at once with that failure (the one output holds part of the stream);
// with Open, a failed stream fails only itself. It also ends early when
// Served says so or a stream's reader or writer is stuck. A failure of
// this host's resources (conn.ErrLocal) ends it unless Keep or a stream
// is in progress; no claim within Wait is a conn.KindSetup error, and ctx
// ending before any a conn.KindAborted one that wraps its cause.
func (s *Server) Serve(ctx context.Context) (pipe.Stats, error) {
	l := &loop{s: s, ctx: ctx, results: make(chan served), asks: make(chan *handover), refused: Refusals{W: s.Log, Prog: s.Prog}, waiting: newHandshakes()}
	accepted, acceptErrs := make(chan conn.Conn), make(chan error)
	actx, stopAccepting := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		acceptLoop(actx, s.Listener, accepted, acceptErrs)
	}()
	defer func() {
		stopAccepting()
		l.close()
		<-loopDone
	}()
	var wait <-chan time.Time
	if s.Wait > 0 {
		timer := time.NewTimer(s.Wait)
		defer timer.Stop()
		wait = timer.C
	}
	done := ctx.Done()
	for {
		select {
		case h := <-l.asks:
			l.ask(h)
		case c := <-accepted:
			l.accept(c)
		case err := <-acceptErrs:
			l.refused.Log(err)
			if errors.Is(err, conn.ErrLocal) && !s.Keep && !l.serving.Load() {
				return pipe.Stats{}, err
			}
		case r := <-l.results:
			if !l.ended(r) {
				// A claim given back (a relay not set up) served no
				// stream: the context's end counts again.
				done = ctx.Done()
				continue
			}
			wait = nil
			if !l.served(r) {
				return r.st, l.tally.result()
			}
		case <-wait:
			return pipe.Stats{}, conn.Errorf(conn.KindSetup, "wait for the sender", "no sender claimed the receiver within %v", s.Wait)
		case <-done:
			if l.serving.Load() {
				done = nil // the stream in progress ends with the cancellation
				continue
			}
			if s.Keep {
				return l.last, l.tally.result()
			}
			return pipe.Stats{}, &conn.Error{Kind: conn.KindAborted, Op: "wait for the sender", Err: context.Cause(ctx)}
		}
	}
}

// loop is the state of one Serve.
type loop struct {
	s        *Server
	ctx      context.Context
	results  chan served
	asks     chan *handover
	serving  atomic.Bool // a sender has claimed the receiver
	streams  atomic.Int64
	refused  Refusals
	waiting  *handshakes // handshaking or claimed
	inFlight int         // connections whose result is still to come
	asked    *handover   // a claimed stream's wait for a replacement sender
	lobby    []conn.Conn // connections that came while the stream was served, oldest first
	tally    tally
	last     pipe.Stats // the last stream's
}

// close gives up the connections still handshaking or waiting, and waits
// for every result.
func (l *loop) close() {
	for _, p := range l.waiting.values() {
		p.drop(nil)
	}
	for ; l.inFlight > 0; l.inFlight-- {
		<-l.results
	}
	for _, c := range l.lobby {
		c.Close()
	}
}

// ask takes a claimed stream's wait for a replacement sender: the oldest
// connection waiting in the lobby, or the next one accepted.
func (l *loop) ask(h *handover) {
	if len(l.lobby) > 0 && h.give(l.lobby[0]) {
		l.lobby = l.lobby[1:]
		return
	}
	l.asked = h
	l.s.Listener.SetBusy(false)
}

// accept takes a new connection: to a stream waiting for a replacement
// sender, to the lobby while a stream with Rejoin is served, or to a
// handshake of its own, as handshakePolicy admits it.
func (l *loop) accept(c conn.Conn) {
	if l.asked != nil {
		taken := l.asked.give(c)
		l.asked = nil
		l.s.Listener.SetBusy(l.serving.Load())
		if taken {
			return
		}
	}
	if l.s.Rejoin && l.serving.Load() {
		if l.lobby = append(l.lobby, c); len(l.lobby) > MaxHandshakes {
			l.lobby[0].Close()
			l.lobby = l.lobby[1:]
		}
		return
	}
	l.handshake(c)
}

// handshake starts c's handshake, if handshakePolicy admits it.
func (l *loop) handshake(c conn.Conn) {
	if p := l.waiting.arrive(c); p != nil {
		l.start(p)
		l.inFlight++
	}
}

// ended takes a connection's result and reports whether it was a claimed
// stream; one that was not is logged (a refusal) or told to Probed.
func (l *loop) ended(r served) bool {
	l.inFlight--
	l.waiting.leave(r.p)
	if r.p.state.Load() == claimed {
		return true
	}
	switch {
	case errors.Is(r.err, pipe.ErrProbe):
		if l.s.Probed != nil {
			l.s.Probed(r.p.c.Info().Remote)
		}
	case r.err != nil && l.ctx.Err() == nil:
		l.refused.Log(r.err)
	}
	return false
}

// served counts a claimed stream that ended and reports whether to serve
// the next sender; if so, the connections in the lobby handshake.
func (l *loop) served(r served) bool {
	l.asked = nil
	err, more := r.err, true
	if l.s.Served != nil {
		err, more = l.s.Served(r.st, r.err)
	}
	l.serving.Store(false)
	l.s.Listener.SetBusy(false)
	l.last = r.st
	l.tally.add(err)
	if !goOn(l.s.Keep, l.s.Open != nil, more, errors.Is(r.err, pipe.ErrStuck), l.ctx.Err() != nil, err) {
		return false
	}
	for _, c := range l.lobby { // the next senders, perhaps
		l.handshake(c)
	}
	l.lobby = nil
	if err != nil {
		fmt.Fprintf(l.s.Log, "%s: stream %d from %s failed: %v (waiting for the next sender)\n", l.s.Prog, r.n, r.p.c.Info().Remote, err)
	}
	return true
}

// goOn says whether a Server goes on to the next sender after a claimed
// stream that ended with err (as Served made it): only with keep, when
// Served says more, the stream is not stuck, ctx has not ended, and
// either the stream was whole or it had an output of its own (own): a
// failed stream in the one output all streams share ends the Server.
func goOn(keep, own, more, stuck, cancelled bool, err error) bool {
	return keep && more && !stuck && !cancelled && (err == nil || own)
}

// tally counts a Server's streams and their failures.
type tally struct {
	streams, failed int
	last            error // the last failure
}

func (t *tally) add(err error) {
	t.streams++
	if err != nil {
		t.failed++
		t.last = err
	}
}

// result is what Serve returns for the streams served: nil if none
// failed, the failure if one stream was served, else how many failed and
// the last failure (whose kind gives the exit status).
func (t tally) result() error {
	switch {
	case t.failed == 0:
		return nil
	case t.streams == 1:
		return t.last
	}
	return fmt.Errorf("%d of %d streams failed, the last: %w", t.failed, t.streams, t.last)
}

// start handshakes with the sender of p in a goroutine and, if it claims
// the receiver (progressing in l.waiting), streams it to its output (Out,
// or what Open gives); the outcome goes to l.results, and a wait for a
// replacement sender (with Rejoin) to l.asks.
func (l *loop) start(p *pending) {
	s, c := l.s, p.c
	hctx, cancel := context.WithCancelCause(l.ctx)
	p.cancel = cancel
	cfg := s.Config
	if s.Rejoin {
		cfg.Rejoin = rejoin(l.asks)
	}
	var h Hooks
	if s.Attach != nil {
		h = s.Attach(&cfg)
	}
	var out streamOutput
	if s.Open != nil {
		out.open(&cfg, s.Open, c, &l.streams)
	}
	cfg.Claim = func() bool {
		if !p.state.CompareAndSwap(handshaking, claimed) {
			return false
		}
		if !l.serving.CompareAndSwap(false, true) {
			p.state.Store(handshaking)
			return false
		}
		s.Listener.SetBusy(true)
		l.waiting.progress(p)
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
		l.serving.Store(false)
		p.state.Store(handshaking)
	}
	go func() {
		defer cancel(nil)
		st, err := pipe.Receive(hctx, c, s.Out, cfg)
		stuck := pipe.Release(c, err)
		err = out.end(err)
		if p.state.Load() == claimed && h.Ended != nil {
			h.Ended(stuck)
		}
		l.results <- served{p: p, n: out.n, st: st, err: err}
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
