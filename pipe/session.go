// Package pipe is the rdmapipe streaming engine: it moves a byte stream from
// an io.Reader on one host to an io.Writer on another over a conn.Conn, a
// small interface with the semantics of an RDMA reliable-connected queue
// pair (package pipe/conn).
//
// Credits, framing, end-of-stream, abort, authentication and the stream
// checksum live here, once. Transports (TCP, RDMA verbs, in-memory) only move
// messages between buffers; see the sub-packages of pipe/transport. The
// message encodings are in pipe/internal/wire, the key's proofs and MACs in
// pipe/internal/auth, reading the input and writing the output in
// pipe/internal/source and pipe/internal/sink.
package pipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// Config holds what both ends of a stream may set.
type Config struct {
	// Key is the shared secret both peers must hold; empty means none.
	Key []byte
	// Encrypt, for Send, encrypts the stream's data with a subkey of the
	// handshake (AES-256-GCM, which also authenticates it); it needs a
	// Key. For Receive it refuses a sender that does not encrypt. A
	// receiver with a key decrypts whatever its sender encrypts, and a
	// relay encrypts towards the next receiver what arrived encrypted.
	Encrypt bool
	// Timeout is how long a peer may stay silent before the stream is
	// given up; 0 means wait forever. While a stream is open the sender
	// sends a heartbeat whenever the receiver has been silent for a second
	// (Timeout/4 if that is shorter) and its last heartbeat was answered,
	// and the receiver answers each: so while data flows there are none,
	// and only a dead or hung peer (or network) is silent for a Timeout,
	// as long as the peer's Timeout is over a second too.
	Timeout time.Duration
	// HandshakeTimeout bounds the handshake (hello, key proofs, welcome)
	// after the transport connected; 0 means DefaultHandshakeTimeout. A
	// peer that is not rdmapipe, or that connects and says nothing, is
	// given up after it.
	HandshakeTimeout time.Duration
	// Progress, if set, is called with the stream's byte count so far
	// after each chunk.
	Progress func(bytes int64)
	// Sparse, for Receive, writes the blocks of zeros of a regular-file
	// output as holes (those past the file's size when the stream
	// begins; earlier ones are written, so that nothing of the old
	// content shows through), and sets the file's length at the end, as
	// cp --sparse=always does. Any other output (see SparseOutput) fails
	// the stream with a usage error.
	Sparse bool
	// Gauges, if set, is kept up to date while the stream runs.
	Gauges *Gauges
	// Sync, if set, is called by Receive once the whole stream is written
	// and verified, before it confirms the stream to the sender: with an
	// fsync there, the sender's exit 0 means "on disk". An error fails
	// the stream: a *conn.Error as it is, any other as one that says the
	// stream may not be on disk.
	Sync func() error
	// Output, if set, is called by Receive once the sender has claimed
	// the receiver and been welcomed, before the stream's first byte: the
	// stream is written to the writer it returns instead of Receive's w.
	// An error fails the stream.
	Output func() (io.Writer, error)
	// Claim, if set, is called by Receive once the sender has completed
	// the handshake, before the receiver welcomes it: returning false
	// refuses the sender as busy. A receiver that handshakes with several
	// senders at once serves the first one it claims.
	Claim func() bool
	// Unclaim, if set, is called by Receive when it claimed the receiver
	// but could not set up the relay to the next receiver: the stream
	// fails before its welcome, and the receiver may serve another sender.
	Unclaim func()
	// Relay, if set, lets Receive relay to the chain of receivers its
	// sender names (after the sender's key proof, if there is a key): it
	// is given the first of them and returns the address to connect to
	// with Forward, or why this receiver does not relay there; the sender
	// is then told only that it does not. Without Relay a sender's chain
	// is refused, and no connection is made. ForwardTo needs no Relay.
	Relay func(ctx context.Context, next string) (string, error)
	// Chain lists, for Send, the receivers after the one it connects to:
	// each relays the stream to the next (see Forward), and Send succeeds
	// only when every one of them wrote every byte.
	Chain []string
	// Forward connects a relay to the next receiver: when ForwardTo is set,
	// or the sender names a chain of receivers that Relay allows, Receive
	// connects to the next one with Forward (after the sender's key proof
	// and the claim, before it welcomes the sender, all set-up down the
	// chain within one handshake timeout) and sends it everything it
	// writes to its own output, passing the rest of the chain on. It
	// confirms the stream only when the next receiver has confirmed it
	// too; a failure anywhere fails the stream on every side, naming the
	// receiver (unless the chain is repaired, see Repair, for which Send
	// and relays connect to fallbacks with Forward too). Until the next
	// receiver has welcomed the relay, what it says is reported here but
	// not passed to the sender. Probes are not relayed.
	Forward func(ctx context.Context, addr string) (conn.Conn, error)
	// ForwardTo is a next receiver Receive always relays to (before any
	// chain the sender names).
	ForwardTo string
	// ForwardKey is the key the receiver at ForwardTo holds, when it is
	// not Key: a chain whose every hop has its own one-time key (so that a
	// receiver can relay only where the one who set the chain up said).
	ForwardKey []byte
	// Repair, for Send and for a relay (a Receive with ForwardTo), gives
	// up a next receiver that fails mid-stream (its connection fails, it
	// aborts, or it is silent past Timeout) instead of failing the
	// stream: the sender or relay then connects with Forward to the first
	// of Fallback that completes a rejoin handshake (see Rejoin) within
	// twice the handshake timeout and Timeout (a fallback takes it only
	// once it has lost its own upstream), which says how many bytes it
	// has written, and resends from exactly there.
	// A fallback that cannot be reached, refuses, or is further behind
	// than the history (see below) is given up too, and the next one
	// tried. With none left, a relay goes on writing its own output
	// alone, and Send fails. Every host given up is named in Stats.Lost
	// (as Fallback, ForwardTo or the Chain name it; Send's first receiver
	// as its connection's Info().Remote), up the chain to the sender,
	// whose stream still succeeds when every other receiver confirmed it:
	// the caller decides what a loss means.
	// Repair needs a Key: with one, each message's tag is checked before
	// a byte of it is written, so what a receiver wrote from a dead
	// upstream is authentic. What was sent is kept for a resend, in a
	// history of the last windows (chunk x depth) of the first
	// connection: two for the next receiver and two for each fallback,
	// eight at most (a fallback further behind is given up); and a relay
	// copies instead of forwarding from its receive buffers. A failure
	// at set-up is not repaired.
	//
	// For Send with a Chain, the fallbacks are the chain itself unless
	// Fallback says otherwise, and the sender asks the receivers down it
	// to repair it too (under its key proof): each relay's fallbacks are
	// then the receivers after its next one, reached where its Relay
	// allows, with its own Key. So every receiver of such a chain holds
	// the same key, and takes rejoins (see Rejoin).
	Repair bool
	// Fallback lists the receivers after the next one, in chain order,
	// for Repair (which a Fallback sets).
	Fallback []Hop
	// Rejoin, for Receive, is where a replacement upstream comes from
	// when the sender is lost mid-stream (its connection fails, it
	// aborts, or it is silent past Timeout): instead of failing, the
	// receiver writes what arrived intact, then takes connections from
	// Rejoin until one completes a rejoin handshake (a sender holding
	// the key that says it takes over this stream, at this receiver's
	// place in its chain, see Repair: a stream's first sender chooses its
	// identity, and each relay passes it on), tells it
	// (under its key proof) how many bytes it has written, and goes on
	// with the same output and the same relay. Other senders are refused.
	// The wait is bounded by Timeout and the handshake timeout together:
	// the upstream's own repair may take a Timeout to notice the loss.
	// Rejoin needs a Key. Receive closes the connections it returns.
	Rejoin func(ctx context.Context) (conn.Conn, error)
}

// Hop is a receiver further down a chain (see Config.Fallback).
type Hop struct {
	Addr string // where Forward connects to, and its name in Stats.Lost
	Key  []byte // the key it holds; nil: Config.Key (ForwardKey is the next receiver's only)
}

// DefaultHandshakeTimeout is the handshake bound when Config sets none.
const DefaultHandshakeTimeout = 10 * time.Second

// handshakeContext returns ctx bounded by the handshake timeout, times
// the given factor (a sender naming a chain waits for its own handshake
// and the set-up down the chain, bounded by one timeout more), ending
// with a setup error that says what was not heard in time.
func (s *session) handshakeContext(ctx context.Context, what string, factor int) (context.Context, context.CancelFunc) {
	d := s.cfg.HandshakeTimeout
	if d <= 0 {
		d = DefaultHandshakeTimeout
	}
	d *= time.Duration(max(1, factor))
	return context.WithTimeoutCause(ctx, d, conn.Errorf(conn.KindSetup, "handshake", "%s within %v", what, d))
}

// Stats describe a finished (or failed) stream.
type Stats struct {
	Bytes    int64 // payload bytes read (sender) or written (receiver)
	Messages int64 // data messages
	// Sum is, without a key, the stream's checksum: the xxHash64 of the
	// stream's identity and of each data message's sequence number,
	// length and XXH3, in order. With a key it is 0 (the stream's tag
	// authenticates it).
	Sum uint64
	// Integrity says how the data was protected: "xxh3" (a checksum,
	// without a key), "aes-gmac" (authenticated with the key) or
	// "aes-256-gcm" (encrypted and authenticated).
	Integrity string
	Elapsed   time.Duration // from the end of the handshake to the end of the stream
	// Began is, for a sender, whether it began to read its input (after
	// the handshake): a Send that failed with Began false read nothing,
	// so the same input may be sent again.
	Began bool
	Info  conn.Info // the connection's description
	// Receivers is, for a sender, how many receivers confirmed that they
	// wrote the whole stream: the one it sent to and every one down its
	// chain, counted hop by hop (and authenticated with a key).
	Receivers int
	// Lost names, for a sender or relay, the receivers down its chain
	// that were given up (see Config.Repair), in the order they were,
	// with the receivers down the chain's own. The stream may still have
	// succeeded: every other receiver confirmed it.
	Lost []string
	// IO says how the input was read or the output written: "read" or
	// "write" as it comes, "pread" or "pwrite" for a regular file (several
	// at once), "pread O_DIRECT" where the file was read around the cache,
	// "pwrite sparse" with Config.Sparse.
	IO string
}

// streamID is the identity of an unkeyed stream that its checksum starts
// with: the receiver's and the sender's nonces from the handshake.
func streamID(receiverNonce, senderNonce []byte) []byte {
	return append(append([]byte(nil), receiverNonce...), senderNonce...)
}

// pollBatch is how many completions one Poll may return.
const pollBatch = 64

// session is what a sender and a receiver share: the connection, the
// configuration, and the bookkeeping for the idle timeout.
type session struct {
	c    conn.Conn
	cfg  Config
	peer string // "sender" or "receiver": the other side, for messages
	cs   []conn.Completion
	// heard is when the peer was last heard from (UnixNano); the sender's
	// heartbeat goroutine reads it.
	heard atomic.Int64
	// backlog holds completions a handshake step did not get to; the next
	// poll returns them first.
	backlog []conn.Completion
	// idle is the idle-timeout context made from idleParent; stopIdle
	// releases it. See idleContext.
	idle       context.Context
	idleParent context.Context
	stopIdle   context.CancelFunc
	// peerGaveUp is set when the peer aborted or the connection failed:
	// then there is no one to send an abort message to.
	peerGaveUp bool
	// progress is the connection's ProgressCounter at the last idle check.
	progress int64
	// authenticated is set once the handshake has completed: from then
	// on the peer's aborts are trusted to say what happened to the stream.
	authenticated bool
	// seal combines the data messages' checksums or, with a key, tags
	// into the end of the stream; set by the handshake.
	seal *seal.Stream
	// silent is set when the peer was given up for its silence.
	silent bool
}

func newSession(c conn.Conn, cfg Config, peer string) *session {
	s := &session{c: c, cfg: cfg, peer: peer, cs: make([]conn.Completion, pollBatch)}
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
		case time.Since(s.lastHeard()) >= s.cfg.Timeout:
			s.silent = true
			return nil, conn.Errorf(conn.KindAborted, "wait for "+s.peer, "no word from the %s for %v: giving up", s.peer, s.cfg.Timeout)
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
	if s.cfg.Timeout <= 0 {
		return ctx
	}
	if s.idle == nil || s.idleParent != ctx {
		if s.stopIdle != nil {
			s.stopIdle()
		}
		deadline := s.lastHeard().Add(s.cfg.Timeout)
		if _, ok := s.c.(conn.ProgressCounter); ok {
			if ask := time.Now().Add(beatInterval(s.cfg.Timeout)); ask.Before(deadline) {
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

// ErrStuck is joined to a stream's error when its input reader or output
// writer is still blocked in a system call on the connection's buffers
// after the stream failed. The caller must then not Close the connection
// (that would unmap memory the kernel may still read or write) and should
// exit the process instead.
var ErrStuck = errors.New("input or output still blocked")

// Release closes c after Send or Receive returned err, unless err says
// that the stream's reader or writer may still be using c's buffers
// (ErrStuck): c must then stay open, since closing it would unmap memory
// the kernel may still read or write, and the process should exit soon.
// It reports whether it left c open.
func Release(c conn.Conn, err error) (stuck bool) {
	if errors.Is(err, ErrStuck) {
		return true
	}
	c.Close()
	return false
}

// workerGrace is how long a failed stream waits for its reader or writer:
// short, since a failure is reported only after it (a peer's silence is to
// be reported within a second of the timeout), and a reader blocked on an
// idle input never returns by itself.
const workerGrace = 500 * time.Millisecond

// settle waits (up to workerGrace) for a failed stream's reader or writer
// to finish with the connection's buffers, and returns err, marked with
// ErrStuck if it did not.
func settle(err error, done <-chan struct{}) error {
	select {
	case <-done:
		return err
	case <-time.After(workerGrace):
		return stuckError{err}
	}
}

// stuckError is a stream error marked with ErrStuck; its text is err's.
type stuckError struct{ error }

func (e stuckError) Unwrap() []error { return []error{e.error, ErrStuck} }

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
