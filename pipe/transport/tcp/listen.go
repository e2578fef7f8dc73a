package tcp

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/admit"
)

// DefaultListenHandshake is how long a listener waits by default for a new
// connection's proposal, so that a peer that connects and then says
// nothing holds only its own handshake, and only that long.
const DefaultListenHandshake = 5 * time.Second

// handshakes returns the policy for the handshakes a listener has in
// progress, finished ones that wait for Accept included (see
// admit.Policy). A connection has progressed once it sent a valid
// proposal: no newcomer evicts it. A flood of silent connections from one
// host recycles that host's 16 slots; beyond 32 in all, a host that
// already holds one is refused at random, more often as the 64 fill.
func handshakes() admit.Policy {
	return admit.Policy{PerSource: 16, Start: 32, Full: 64, Rate: 0.3}
}

// penalties returns the policy for sources whose handshakes fail (another
// version, garbage, silence, a hang-up): from the second failure on, their
// refusals get no answer, and their handshakes may take less time with
// each failure, down to a quarter of a second.
func penalties() admit.PenaltyPolicy {
	return admit.PenaltyPolicy{Step: time.Second, Max: time.Minute, Floor: 250 * time.Millisecond, Sources: 4096}
}

// refusalBacklog is how many refusals wait for an Accept to report them;
// more are dropped, so that a flood of refused peers holds no memory.
const refusalBacklog = 8

// ListenConfig holds the options for listening. Its zero value uses the
// defaults.
type ListenConfig struct {
	// HandshakeTimeout bounds how long a new connection may take to send
	// its proposal and read the answer. Zero means DefaultListenHandshake.
	HandshakeTimeout time.Duration
}

// Listener accepts senders over TCP. It implements conn.Listener.
//
// A goroutine accepts TCP connections and runs the handshake of each in a
// goroutine of its own, so that a slow or silent peer does not hold up
// the others; Accept returns the finished handshakes.
type Listener struct {
	busy    atomic.Bool // see SetBusy
	ln      *net.TCPListener
	addr    string
	local   conn.Params
	timeout time.Duration // see ListenConfig.HandshakeTimeout

	ready     chan accepted // finished handshakes, for Accept
	refused   chan error    // refusals of peers, for Accept; never waited on
	mu        sync.Mutex
	pending   *admit.Table[net.Conn] // the handshakes in progress
	penalties *admit.Penalties       // the sources whose handshakes failed
	closed    context.Context        // ends when Close is called
	close     context.CancelFunc
	wg        sync.WaitGroup // the accepting goroutine and the handshakes
}

// accepted is one result for Accept: a connection whose handshake
// succeeded with parameters p, or the listener's own error. Its buffers are allocated only
// when Accept takes it (conn), so that handshakes that finished while the
// receiver was not accepting hold a socket each, not a stream's memory.
type accepted struct {
	nc  net.Conn
	p   conn.Params
	err error
}

// conn makes the receiver's Conn of a successful handshake.
func (a accepted) conn() (*Conn, error) {
	if a.nc == nil {
		return nil, a.err
	}
	return newConn(a.nc, conn.ReceiverLayout(a.p), a.p, conn.SenderLayout(a.p).RecvBufs, conn.SpareRecvs)
}

var _ conn.Listener = (*Listener)(nil)

// Listen listens on addr with the default ListenConfig.
func Listen(ctx context.Context, addr string, local conn.Params) (*Listener, error) {
	return ListenConfig{}.Listen(ctx, addr, local)
}

// Listen listens on addr (host:port; an empty host means every address) for
// senders, with local as the receiver's own parameters, and starts
// accepting connections. Errors are *conn.Error values of kind KindSetup
// (KindUsage for bad parameters).
func (lc ListenConfig) Listen(ctx context.Context, addr string, local conn.Params) (*Listener, error) {
	op := "listen on " + addr
	if err := local.Validate(); err != nil {
		return nil, &conn.Error{Kind: conn.KindUsage, Op: op, Err: err}
	}
	var nlc net.ListenConfig
	ln, err := nlc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: err}
	}
	tl := ln.(*net.TCPListener)
	l := newListener(local, lc.HandshakeTimeout)
	l.ln, l.addr = tl, tl.Addr().String()
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// newListener returns a Listener without a socket: the state that
// handshakes need.
func newListener(local conn.Params, timeout time.Duration) *Listener {
	if timeout <= 0 {
		timeout = DefaultListenHandshake
	}
	closed, cancel := context.WithCancel(context.Background())
	return &Listener{local: local, timeout: timeout, ready: make(chan accepted), refused: make(chan error, refusalBacklog),
		pending: admit.NewTable[net.Conn](handshakes(), rand.Float64), penalties: admit.NewPenalties(penalties()),
		closed: closed, close: cancel}
}

// SetBusy says whether the receiver is serving a stream; while it is,
// valid proposals are answered as busy (conn.Params.Busy) and their
// connections closed before anything is allocated for them.
func (l *Listener) SetBusy(busy bool) { l.busy.Store(busy) }

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() string { return l.addr }

// Close stops listening, ends every handshake in progress, closes the
// connections whose handshake finished but that no Accept took, and
// unblocks Accept. It returns when all of that is done.
func (l *Listener) Close() error {
	l.close()
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

// Accept waits for a sender whose handshake finished and returns its
// receiver's Conn, sized by conn.ReceiverLayout.
//
// Connections from anything that is not an rdmapipe sender (it sends
// something else, or nothing within the handshake timeout, or hangs up),
// and senders refused as busy, are closed and skipped: Accept goes on
// waiting. A sender whose proposal the listener refuses (another protocol
// version, bad parameters) is told why, and Accept returns a *conn.Error of
// kind KindSetup that matches conn.ErrRefused; the listener stays open, so
// the caller may Accept again at once. A source refused again within its
// penalty (see penalties) is not told why.
// After Close, Accept returns an error wrapping conn.ErrClosed; when ctx
// ends, one of kind KindAborted.
func (l *Listener) Accept(ctx context.Context) (conn.Conn, error) {
	op := "accept on " + l.addr
	if l.closed.Err() != nil {
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: conn.ErrClosed}
	}
	select {
	case a := <-l.ready:
		if a.err != nil {
			return nil, a.err
		}
		return a.conn()
	case err := <-l.refused:
		return nil, err
	case <-ctx.Done():
		return nil, interrupted(op, ctx.Err())
	case <-l.closed.Done():
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: conn.ErrClosed}
	}
}

// acceptLoop accepts TCP connections until Close and starts a handshake
// for each that the handshakes policy admits.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if l.closed.Err() != nil {
			if nc != nil {
				_ = nc.Close()
			}
			return
		}
		if err != nil {
			// Such as too many open files: tell Accept, which paces us.
			l.deliver(accepted{err: &conn.Error{Kind: conn.KindSetup, Op: "accept on " + l.addr, Err: err}})
			continue
		}
		if !l.admit(nc) {
			_ = nc.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			a, ok := l.handshake(nc)
			if ok {
				l.deliver(a)
			}
			l.leave(nc)
		}()
	}
}

// admit enters nc among the handshakes in progress, ending the one the
// policy drops for it, or reports that nc is refused.
func (l *Listener) admit(nc net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	victim, drop, ok := l.pending.Arrive(source(nc), nc)
	if drop {
		_ = victim.Close() // its handshake fails and leaves
	}
	return ok
}

// progressed marks nc, which sent a valid proposal, as progressed.
func (l *Listener) progressed(nc net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending.Progress(nc)
}

// leave removes nc, whose handshake ended, from those in progress.
func (l *Listener) leave(nc net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending.Leave(nc)
}

// source names the host nc comes from, for the handshakes policy.
func source(nc net.Conn) string {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return nc.RemoteAddr().String()
}

// deliver hands a to Accept, or drops it (closing its connection) when the
// listener closes first.
func (l *Listener) deliver(a accepted) {
	select {
	case l.ready <- a:
	case <-l.closed.Done():
		if a.nc != nil {
			_ = a.nc.Close()
		}
	}
}

// handshake reads the sender's proposal from nc and answers it. It returns
// the connection with ok true, or ok false when the connection was refused
// (reported, see report), skipped (not an rdmapipe sender, busy) or the
// listener closed, and closed it.
func (l *Listener) handshake(nc net.Conn) (a accepted, ok bool) {
	src := source(nc)
	timeout, penalized := l.penalty(src)
	end := guard(l.closed, nc, timeout)
	p, reply, refused, err := l.answer(nc)
	if err == nil && refused == nil {
		l.progressed(nc)
	}
	if err == nil && (refused == nil || !penalized) {
		_, err = nc.Write(reply)
	}
	if cerr := end(); cerr != nil {
		err = cerr
	}
	if err == nil && refused == nil {
		if p.Busy {
			_ = nc.Close()
			return accepted{}, false
		}
		return accepted{nc: nc, p: p}, true
	}
	// The failure counts before the peer sees the hang-up, so that its
	// next connection meets the penalty.
	if l.closed.Err() == nil {
		l.fail(src)
	}
	_ = nc.Close()
	if refused != nil {
		l.report(&conn.Error{Kind: conn.KindSetup, Op: "accept from " + nc.RemoteAddr().String(), Err: refused})
	}
	return accepted{}, false
}

// penalty returns how long a handshake from src may take, and whether src
// is penalized.
func (l *Listener) penalty(src string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.penalties.Timeout(src, time.Now(), l.timeout)
}

// fail records a failed handshake from src.
func (l *Listener) fail(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.penalties.Fail(src, time.Now())
}

// report hands a refusal to Accept, or drops it when refusalBacklog are
// already waiting: a refused peer holds no goroutine and no buffer.
func (l *Listener) report(err error) {
	select {
	case l.refused <- conn.Refused(err):
	default:
	}
}

// answer reads a proposal from r and returns the reply to write: the
// negotiated parameters p, or a busy answer (p.Busy set), or why the
// proposal was refused. err is a read or decoding error: the peer is not
// an rdmapipe sender, and gets no reply.
func (l *Listener) answer(r io.Reader) (p conn.Params, reply []byte, refused, err error) {
	b := make([]byte, conn.ParamsLen)
	if _, err := io.ReadFull(r, b); err != nil {
		return p, nil, nil, err
	}
	var proposal conn.Params
	if err := proposal.UnmarshalBinary(b); err != nil {
		return p, nil, nil, err
	}
	p, refused = conn.Negotiate(l.local, proposal)
	switch {
	case refused != nil:
		// A refusal carries the listener's protocol version and no parameters.
		p = conn.Params{Version: conn.Version}
	case l.busy.Load():
		p = conn.Params{Version: conn.Version, Chunk: l.local.Chunk, Depth: l.local.Depth, Busy: true}
	}
	reply, _ = p.MarshalBinary()
	return p, reply, refused, nil
}
