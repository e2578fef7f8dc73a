package pipe

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// handshakeContext returns ctx bounded by factor handshake timeouts,
// ending with a setup error that says what was not heard in time.
func (s *session) handshakeContext(ctx context.Context, what string, factor int) (context.Context, context.CancelFunc) {
	d := s.timeouts.handshake * time.Duration(max(1, factor))
	return context.WithTimeoutCause(ctx, d, conn.Errorf(conn.KindSetup, "handshake", "%s within %v", what, d))
}

// pollBatch is how many completions one Poll may return.
const pollBatch = 64

// session is what a sender and a receiver share: the connection, the
// timeouts, and the bookkeeping for the idle timeout. "The poll loop"
// below is the goroutine that polls the connection: a receiver's receive
// loop, a sender's stream goroutine, and either one's handshake before.
// Each field says who writes it and who reads it.
type session struct {
	// c is the connection: every goroutine of the stream uses it, as the
	// conn.Conn contract allows.
	c conn.Conn
	// timeouts are set by the session's maker (a link sets a taker-over's
	// silence after its handshake); the poll loop and the heartbeat read
	// them.
	timeouts timeouts
	peer     string            // "sender" or "receiver": the other side, for messages; set once
	cs       []conn.Completion // poll's batch: the poll loop's
	// heard is when the peer was last heard from (UnixNano): the poll
	// loop stores it, the sender's heartbeat goroutine reads it.
	heard atomic.Int64
	// backlog holds completions a handshake step did not get to; the next
	// poll returns them first. The poll loop's (setUpRelay's watcher
	// hands it what it polled once it has stopped).
	backlog []conn.Completion
	// idle is the idle-timeout context made from idleParent; stopIdle
	// releases it. See idleContext. The poll loop's.
	idle       context.Context
	idleParent context.Context
	stopIdle   context.CancelFunc
	// peerGaveUp is set when the peer aborted or the connection failed:
	// then there is no one to send an abort message to. The poll loop
	// sets it; it and the stream's maker (Send, Receive, the relay, a
	// link), once the stream is over, read it.
	peerGaveUp bool
	// progress is the connection's ProgressCounter at the last idle
	// check: the poll loop's.
	progress int64
	// authenticated is set once the handshake has completed: from then
	// on the peer's aborts are trusted to say what happened to the
	// stream. The poll loop's.
	authenticated bool
	// seal combines the data messages' checksums or, with a key, tags
	// into the end of the stream: the handshake sets it; then the
	// sender's poster or the receiver's writer adds to it, and the
	// sealing workers use its workers (newSealers).
	seal *seal.Stream
	// silent is set when the peer was given up for its silence: the poll
	// loop's.
	silent bool
}

func newSession(c conn.Conn, t timeouts, peer string) *session {
	s := &session{c: c, timeouts: t, peer: peer, cs: make([]conn.Completion, pollBatch)}
	s.heardFrom()
	return s
}

// poll waits for completions, ending with an error if ctx ends, the
// connection fails, or the peer stays silent longer than the idle timeout.
func (s *session) poll(ctx context.Context) ([]conn.Completion, error) {
	if len(s.backlog) > 0 {
		cs := s.backlog
		s.backlog = nil
		return cs, nil
	}
	var n int
	for {
		pctx := s.idleContext(ctx)
		var err error
		n, err = s.c.Poll(pctx, s.cs)
		if err == nil {
			break
		}
		switch {
		case ctx.Err() != nil:
			return nil, s.cancelled(ctx)
		case pctx.Err() == nil:
			s.peerGaveUp = true
			return nil, s.lost(err)
		case s.progressing():
		case time.Since(s.lastHeard()) >= s.timeouts.silence:
			s.silent = true
			return nil, conn.Errorf(conn.KindAborted, "wait for "+s.peer, "no word from the %s for %v: giving up", s.peer, s.timeouts.silence)
		}
		s.idle = nil // the peer was heard since the deadline was set: renew it
	}
	for _, c := range s.cs[:n] {
		if c.Op == conn.OpRecv {
			s.heardFrom()
			if pc, ok := s.c.(conn.ProgressCounter); ok {
				s.progress = pc.Progress() // what moved so far is heard
			}
			break
		}
	}
	return s.cs[:n], nil
}

// progressing reports whether bytes moved between the peers since the peer
// was last heard from or it was last asked, when the connection can tell
// (ProgressCounter); if so the peer counts as heard.
func (s *session) progressing() bool {
	pc, ok := s.c.(conn.ProgressCounter)
	if !ok {
		return false
	}
	n := pc.Progress()
	if n == s.progress {
		return false
	}
	s.progress = n
	s.heardFrom()
	return true
}

// keep saves the completions of a batch that were not handled for the
// next poll.
func (s *session) keep(rest []conn.Completion) {
	s.backlog = append([]conn.Completion(nil), rest...)
}

// lost describes a failure of the connection to the peer.
func (s *session) lost(err error) error {
	return wrap(conn.KindAborted, fmt.Sprintf("connection to %s %s", s.peer, s.c.Info().Remote), err)
}

// sendFailed is what a goroutine other than the poll loop does when a send
// fails because the connection broke: the poll loop reports why after the
// completions already queued (such as the peer's abort), and its verdict
// must win. So it waits for the stream to end, at most lastWordsTimeout,
// and returns the stream's cause if it did, else err as a lost connection.
func (s *session) sendFailed(ctx context.Context, err error) error {
	t := time.NewTimer(lastWordsTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return s.lost(err)
	}
}

// repost makes receive buffer i available again. It fails only when the
// connection broke, and then the transport's Poll reports that after the
// completions already queued, such as the peer's last words, which must
// still be handled: so the error is left to Poll.
func (s *session) repost(i int) {
	_ = s.c.PostRecv(i)
}

// idleContext returns ctx limited by the idle timeout. To keep the hot path
// free of allocations it is renewed only when it expires (see poll), so its
// deadline can be up to one Timeout early; poll then checks the real one.
// Over a connection that can tell that bytes are moving (ProgressCounter)
// it also expires every beatInterval, for poll to ask: progress then
// counts from at most that long after it happened, so that a peer that
// stops is given up within Timeout and one interval.
func (s *session) idleContext(ctx context.Context) context.Context {
	if s.timeouts.silence <= 0 {
		return ctx
	}
	if s.idle == nil || s.idleParent != ctx {
		if s.stopIdle != nil {
			s.stopIdle()
		}
		deadline := s.lastHeard().Add(s.timeouts.silence)
		if _, ok := s.c.(conn.ProgressCounter); ok {
			if ask := time.Now().Add(beatInterval(s.timeouts.silence)); ask.Before(deadline) {
				deadline = ask
			}
		}
		s.idle, s.stopIdle = context.WithDeadline(ctx, deadline)
		s.idleParent = ctx
	}
	return s.idle
}

// release frees the idle-timeout context.
func (s *session) release() {
	if s.stopIdle != nil {
		s.stopIdle()
	}
}

// cancelled turns the end of ctx into an error: the cause if one was given
// (a signal, a failed reader or writer), else an interruption.
func (s *session) cancelled(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return conn.Errorf(conn.KindAborted, "", "interrupted")
}

// maxBeat is the longest interval between heartbeats.
const maxBeat = time.Second

// beatInterval is how long a sender lets the receiver stay silent before
// it sends a heartbeat: maxBeat, or Timeout/4 if that is shorter.
func beatInterval(timeout time.Duration) time.Duration {
	if timeout > 0 {
		return max(min(maxBeat, timeout/4), time.Millisecond)
	}
	return maxBeat
}

// heardFrom records that the peer was heard from now.
func (s *session) heardFrom() { s.heard.Store(time.Now().UnixNano()) }

// lastHeard returns when the peer was last heard from.
func (s *session) lastHeard() time.Time { return time.Unix(0, s.heard.Load()) }

// peerAbort is the error for an abort message from the peer. Its reason
// is quoted; before the handshake completed it is marked unauthenticated
// and can only make the stream a setup, busy or key failure (see peerKind).
func (s *session) peerAbort(body []byte) error {
	s.peerGaveUp = true
	k, reason := wire.ParseAbort(body)
	op := s.peer + " aborted"
	if !s.authenticated {
		op = s.peer + " refused the connection"
	}
	return &conn.Error{Kind: wire.PeerKind(k, s.authenticated), Op: op, Err: errors.New(reason)}
}

// guard runs f and turns a panic in it into an internal error, so that a
// bug in a stream's goroutine fails that stream with exit code 1 instead of
// crashing the process with the runtime's code 2.
func guard(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = conn.Errorf(conn.KindInternal, "", "bug: %v (please report it with this message)\n%s", p, debug.Stack())
		}
	}()
	return f()
}

// lastWordsTimeout bounds how long a failing side waits to hand its abort
// message to the transport: the peer may be the reason it fails.
const lastWordsTimeout = time.Second

// lastWords sends a final message (an abort) to the peer, waiting at most
// lastWordsTimeout for room to send it.
func lastWords(c conn.Conn, msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), lastWordsTimeout)
	defer cancel()
	return c.SendControl(ctx, msg)
}

// nextRecv waits for received messages and hands each, copied out after its
// buffer is re-posted, to take, until take accepts one (true), which it
// returns, or fails; completions after the accepted one are kept for the
// next poll.
func (s *session) nextRecv(ctx context.Context, take func(msg []byte) (bool, error)) ([]byte, error) {
	for {
		cs, err := s.poll(ctx)
		if err != nil {
			return nil, err
		}
		for i, c := range cs {
			if c.Op != conn.OpRecv {
				continue
			}
			msg := append([]byte(nil), s.c.RecvBuf(c.Buf)[:c.Len]...)
			s.repost(c.Buf)
			ok, err := take(msg)
			if err != nil {
				return nil, err
			}
			if ok {
				s.keep(cs[i+1:])
				return msg, nil
			}
		}
	}
}
