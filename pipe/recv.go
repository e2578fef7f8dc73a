package pipe

import (
	"context"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/sink"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
	"github.com/rdmapipe/rdmapipe/pipe/internal/work"
)

// Receive writes the stream arriving on c to w, verifies its length and
// checksum, and confirms it to the sender. It returns nil only when every
// byte the sender read arrived intact and was written to w. On failure it
// tells the sender why (unless the sender is the one that gave up) and
// returns a *conn.Error. Receive does not close c; it closes the
// connections Config.Rejoin returns.
//
// As buffers arrive, workers on every core check them (and decrypt them),
// and a writer goroutine writes buffer k to w while buffer k+1 arrives and
// is checked; it then re-posts the buffer and returns its credit with a
// single-byte message.
func Receive(ctx context.Context, c conn.Conn, w io.Writer, cfg Config) (Stats, error) {
	r := &receiver{session: newSession(c, cfg, "sender"), w: w, nexts: make(chan struct{}, 1)}
	defer func() { r.release() }()
	var st Stats
	err := guard(func() (err error) {
		st, err = r.run(ctx)
		return err
	})
	if r.relay != nil {
		r.relay.close()
	}
	if err != nil && !r.peerGaveUp && !errors.Is(err, ErrProbe) {
		lastWords(r.c, wire.AbortMessage([]byte{wire.MsgAbort}, conn.KindOf(err), publicReason(err), 0))
	}
	if r.rejoined && !errors.Is(err, ErrStuck) {
		r.c.Close()
	}
	return st, err
}

// SparseOutput says why w cannot take a stream with Config.Sparse, or
// returns nil if it can: w must be an *os.File of a regular file, at an
// offset, not in append mode.
func SparseOutput(w io.Writer) error {
	return sink.CheckSparse(w)
}

// receiver is the state of one Receive.
type receiver struct {
	*session
	w        io.Writer
	written  atomic.Int64 // bytes written to w
	messages atomic.Int64 // data messages written
	sum      uint64       // the stream's checksum (without a key); set by finish
	endSeen  bool         // the end-of-stream message went to the writer
	finished bool         // the writer confirmed the whole stream to the sender
	probe    bool         // the sender only checks the connection (Probe)
	batch    int          // credits returned in one message at most
	pending  int          // credits held back for the next message
	relay    *relay       // towards the next receiver (Config.Forward)
	// drain is set when the sender was lost and Config.Rejoin may bring
	// another: the writer then writes what arrived and stops.
	drain atomic.Bool
	// rejoined is set once a sender from Config.Rejoin took over: the
	// connection is then Receive's to close.
	rejoined bool
	// nexts has a token for each next message from the sender, which
	// asks for more of the lost hosts' names (see finish).
	nexts chan struct{}
	// lostDown names the hosts down the chain given up, as the relay
	// says.
	lostDown []string
	pool     *work.Pool        // checks (and decrypts) the data messages
	sealers  chan *seal.Worker // one for each goroutine that may check at once
	// id is the stream's identity and place this receiver's place in its
	// chain, as the first sender claimed them: a rejoin must claim them
	// too.
	id    []byte
	place uint32
}

// arrival is a received message handed to the writer goroutine: the
// payload (or the end message's body) in receive buffer buf is its first
// len bytes, and job checks it.
type arrival struct {
	buf, len int
	seq      uint32
	end      bool
	job      *work.Job   // sets d and ok
	d        seal.Digest // the payload's digest
	ok       bool        // it matches its tag (always, without a key)
}

func (r *receiver) run(parent context.Context) (Stats, error) {
	st := Stats{Info: r.c.Info()}
	if r.cfg.Rejoin != nil && len(r.cfg.Key) == 0 {
		return st, conn.Errorf(conn.KindUsage, "rejoin", "taking a stream over from another sender needs a shared key: without one, its senders cannot be told apart")
	}
	if err := checkRepair(r.cfg); err != nil {
		return st, err
	}
	if err := r.handshake(parent, false); err != nil {
		return st, err
	}
	if r.probe {
		return st, r.endProbe(parent)
	}
	st.Info = r.c.Info() // the window, registered by the handshake, included
	start := time.Now()
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	info := r.c.Info()
	w, err := r.output()
	if err != nil {
		return st, err
	}
	out, err := sink.New(w, conn.NewParams(info.Chunk, info.Depth).Credits(), r.cfg.Sparse)
	if err != nil {
		return st, &conn.Error{Kind: conn.KindUsage, Op: "sparse output", Err: err}
	}
	st.IO = out.Describe()
	if r.relay != nil {
		st.IO += ", " + r.relay.describe()
		r.relay.start(ctx, cancel)
	}
	err = r.streamFrom(ctx, out)
	var lost rejoinError
	for errors.As(err, &lost) {
		if err = r.takeRejoin(ctx, lost.error); err != nil {
			r.written.Add(out.Close(r.written.Load()))
			break
		}
		err = r.streamFrom(ctx, out)
	}
	st.Bytes, st.Messages, st.Elapsed = r.written.Load(), r.messages.Load(), time.Since(start)
	st.Lost = r.lostDown
	if err == nil {
		st.Sum, st.Integrity = r.sum, r.seal.Name()
		return st, nil
	}
	cancel(err)
	return st, err
}

// output returns where the stream is written: w, or what Config.Output
// gives.
func (r *receiver) output() (io.Writer, error) {
	if r.cfg.Output == nil {
		return r.w, nil
	}
	w, err := r.cfg.Output()
	if ce := (*conn.Error)(nil); err != nil && !errors.As(err, &ce) {
		err = &conn.Error{Kind: conn.KindAborted, Op: "open the output", Err: err}
	}
	return w, err
}

// rejoinError is the loss of the sender, which a sender from
// Config.Rejoin may repair.
type rejoinError struct{ error }

func (e rejoinError) Unwrap() error { return e.error }

// streamFrom receives the stream from the current sender and writes it
// to out, until its end (nil) or a failure. When the sender is lost and
// Config.Rejoin may bring another, the writer first writes what arrived
// intact, and the failure is a rejoinError.
func (r *receiver) streamFrom(parent context.Context, out sink.Sink) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	arrivals := make(chan *arrival, r.c.RecvBufs())
	r.pool = work.New(runtime.GOMAXPROCS(0), r.c.RecvBufs())
	defer r.pool.Close() // before the buffers go: the workers use them
	r.sealers = newSealers(r.seal)
	info := r.c.Info()
	r.batch = creditBatch(info.Chunk, conn.NewParams(info.Chunk, info.Depth).Credits())
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		err := guard(func() error { return r.write(ctx, arrivals, out) })
		if err == nil {
			err = errFinished
		}
		cancel(err)
	}()

	err := r.receive(ctx, arrivals)
	drain := r.cfg.Rejoin != nil && ctx.Err() == nil && !r.endSeen && (r.peerGaveUp || r.silent)
	r.drain.Store(drain)
	close(arrivals)
	if r.endSeen && r.peerGaveUp && parent.Err() == nil {
		// The whole stream arrived before the connection went (the sender
		// hangs up as soon as it has the confirmation, which can beat the
		// writer's own "finished" here): the writer's verdict decides.
		select {
		case <-writeDone:
			err = context.Cause(ctx)
		case <-parent.Done():
		}
	}
	if drain {
		select {
		case <-writeDone:
			if cause := context.Cause(ctx); !errors.Is(cause, errFinished) {
				return cause // the writer failed
			}
			return rejoinError{err}
		case <-parent.Done():
			err = context.Cause(parent)
		}
	}
	if errors.Is(err, errFinished) {
		<-writeDone
		return nil
	}
	cancel(err)
	err = settle(err, writeDone)
	select {
	case <-writeDone:
		if r.finished {
			return nil // confirmed to the sender before the failure (a signal) came
		}
	default:
	}
	return err
}

// handshake sends the hello, checks the sender's proof of the key (if any),
// claims the receiver for this sender (Config.Claim) and answers with the
// welcome, all within the handshake timeout.
func (r *receiver) handshake(parent context.Context, rejoin bool) error {
	ctx, cancel := r.handshakeContext(parent, "the sender did not complete the rdmapipe handshake", 1)
	defer func() { cancel() }()
	nonce, err := auth.NewNonce()
	if err != nil {
		return conn.Errorf(conn.KindInternal, "authenticate", "random nonce: %v", err)
	}
	haveKey := len(r.cfg.Key) > 0
	hello := []byte{wire.MsgHello, 0}
	if haveKey {
		hello[1] = wire.FlagKey
	}
	hello = append(hello, nonce[:]...)
	if err := r.c.SendControl(ctx, hello); err != nil {
		return wrap(conn.KindSetup, "send hello", err)
	}
	msg, err := r.next(ctx)
	if err != nil {
		return err
	}
	body, typ, _, _ := wire.ParseTrailer(msg)
	if typ != wire.MsgAuth || len(body) < wire.AuthBody {
		return conn.Errorf(conn.KindSetup, "handshake", "unexpected message %s from the sender: is it an rdmapipe sender of the same version?", wire.Describe(msg))
	}
	theirFlags := body[0]
	theirNonce, theirProof := body[wire.AuthNonce:wire.AuthID], body[wire.AuthMAC:wire.AuthBody]
	id, place := body[wire.AuthID:wire.AuthPlace], binary.LittleEndian.Uint32(body[wire.AuthPlace:])
	switch {
	case haveKey && theirFlags&wire.FlagKey == 0:
		return conn.Errorf(conn.KindAuth, "authenticate", "the sender presented no key: give it the same key")
	case !haveKey && theirFlags&wire.FlagKey != 0:
		return conn.Errorf(conn.KindAuth, "authenticate", "the sender has a key but this receiver has none")
	case theirFlags&wire.FlagEncrypt != 0 && theirFlags&wire.FlagKey == 0:
		return conn.Errorf(conn.KindSetup, "handshake", "the sender asks for encryption without a key")
	case r.cfg.Encrypt && theirFlags&(wire.FlagEncrypt|wire.FlagProbe) == 0:
		return conn.Errorf(conn.KindAuth, "authenticate", "the sender does not encrypt, and this receiver accepts only encrypted streams")
	case !rejoin && theirFlags&wire.FlagRejoin != 0:
		return conn.Errorf(conn.KindSetup, "handshake", "the sender takes over a stream this receiver has not begun")
	case theirFlags&wire.FlagRepair != 0 && theirFlags&(wire.FlagKey|wire.FlagChain) != wire.FlagKey|wire.FlagChain:
		return conn.Errorf(conn.KindSetup, "handshake", "the sender asks for a chain to be repaired without a key or a chain")
	case rejoin && theirFlags&(wire.FlagRejoin|wire.FlagChain|wire.FlagProbe) != wire.FlagRejoin:
		return conn.Errorf(conn.KindSetup, "handshake", "the sender does not take over the stream this receiver has begun: it is taking no other")
	}
	var chain []string
	if theirFlags&wire.FlagChain != 0 {
		if chain, err = r.receiveChain(ctx); err != nil {
			return err
		}
	}
	// The proof covers the whole handshake, the chain included: nothing
	// the sender said is acted on before it is checked.
	var t []byte
	if haveKey {
		t = auth.Transcript(r.c.Info(), hello, theirFlags, theirNonce, id, place, chain)
		if !auth.ValidProof(r.cfg.Key, auth.SenderProof, t, theirProof) {
			return conn.Errorf(conn.KindAuth, "authenticate", "the sender's key is wrong, or the handshake was altered on the way")
		}
	}
	if err := r.takeClaim(id, place, rejoin); err != nil {
		return err
	}
	r.probe = theirFlags&wire.FlagProbe != 0
	next := ""
	if !rejoin {
		if next, err = r.nextHop(ctx, chain); err != nil {
			return err
		}
	}
	if !r.probe && !rejoin && r.cfg.Claim != nil && !r.cfg.Claim() {
		return conn.Errorf(conn.KindBusy, "", "the receiver is busy with another stream: retry later")
	}
	if !r.probe && next != "" {
		if err := r.setUpRelay(parent, next, chain, theirFlags); err != nil {
			if r.cfg.Unclaim != nil {
				r.cfg.Unclaim()
			}
			return err
		}
	}
	// Only now, the sender authenticated and the receiver claimed, does
	// the stream's memory get spent.
	var desc []byte
	if w, ok := r.c.(conn.Window); ok && !r.probe {
		if desc, err = w.OpenWindow(); err != nil {
			return wrap(conn.KindSetup, "open the receive window", err)
		}
		if len(desc) > conn.MaxControl-2-auth.MACLen {
			return conn.Errorf(conn.KindInternal, "open the receive window", "a %d-byte description does not fit the welcome", len(desc))
		}
	}
	if r.relay != nil && !rejoin && r.cfg.Rejoin == nil {
		r.relay.adopt(r.c)
	}
	var written []byte // a rejoin's: the bytes written so far
	if rejoin {
		written = binary.LittleEndian.AppendUint64(nil, uint64(r.written.Load()))
	}
	welcome := make([]byte, 2, 2+len(written)+auth.MACLen+len(desc))
	welcome[0] = wire.MsgWelcome
	welcome = append(append(welcome, written...), make([]byte, auth.MACLen)...)
	if haveKey {
		welcome[1] = wire.FlagKey
		copy(welcome[2+len(written):], auth.Proof(r.cfg.Key, auth.ReceiverProof, t, written, desc))
		r.seal = seal.NewKeyed(auth.StreamKey(r.cfg.Key, t), theirFlags&wire.FlagEncrypt != 0)
	} else {
		r.seal = seal.New(streamID(nonce[:], theirNonce))
	}
	welcome = append(welcome, desc...)
	if err := r.c.SendControl(ctx, welcome); err != nil {
		return wrap(conn.KindSetup, "send welcome", err)
	}
	r.authenticated = true
	return nil
}

// takeClaim checks the stream and the place in its chain that the sender
// claims (see package wire): a first handshake's are this receiver's from
// then on, and a rejoin must claim the same two.
func (r *receiver) takeClaim(id []byte, place uint32, rejoin bool) error {
	switch {
	case place == 0 || place > wire.MaxPlace:
		return conn.Errorf(conn.KindSetup, "handshake", "the sender names place %d in the chain, not 1 to %d", place, wire.MaxPlace)
	case !rejoin:
		r.id, r.place = append([]byte(nil), id...), place
	case !hmac.Equal(id, r.id):
		return conn.Errorf(conn.KindSetup, "rejoin", "the sender takes over another stream than this receiver's: refused")
	case place != r.place:
		return conn.Errorf(conn.KindSetup, "rejoin", "the sender takes over the receiver at place %d of the chain, and this one is at place %d: refused", place, r.place)
	}
	return nil
}

// takeRejoin waits for a sender from Config.Rejoin to take the stream
// over after the sender was lost (lost says how), within one Timeout and
// the handshake timeout: connections that fail the rejoin handshake are
// refused, and the next one awaited.
func (r *receiver) takeRejoin(ctx context.Context, lost error) error {
	d := r.cfg.HandshakeTimeout
	if d <= 0 {
		d = DefaultHandshakeTimeout
	}
	d += r.cfg.Timeout
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	r.release()
	if r.rejoined {
		r.c.Close()
	}
	// Until one takes over, the failure is the lost sender's.
	lostSession, lostRejoined := r.session, r.rejoined
	refused := "" // why the last sender that tried was refused
	for {
		c, err := r.cfg.Rejoin(wctx)
		if err != nil || ctx.Err() != nil {
			if err == nil {
				c.Close()
			}
			r.session, r.rejoined = lostSession, lostRejoined
			switch {
			case ctx.Err() != nil:
				return context.Cause(ctx)
			case wctx.Err() != nil:
				return fmt.Errorf("%w; no sender took the stream over within %v%s", lost, d, refused)
			}
			return fmt.Errorf("%w; no sender can take the stream over: %v%s", lost, err, refused)
		}
		r.session = newSession(c, r.cfg, "sender")
		r.rejoined, r.endSeen, r.pending = true, false, 0
		err = guard(func() error { return r.handshake(wctx, true) })
		if err == nil {
			r.drain.Store(false)
			if r.relay != nil {
				r.relay.resize(c.RecvBufs())
			}
			return nil
		}
		if !r.peerGaveUp {
			lastWords(c, wire.AbortMessage([]byte{wire.MsgAbort}, conn.KindOf(err), publicReason(err), 0))
		}
		refused = fmt.Sprintf(" (one from %s was refused: %v)", c.Info().Remote, err)
		r.release()
		c.Close()
	}
}

// next waits for one handshake message from the sender (at least a
// trailer long), copies it out, re-posts its buffer and returns the
// sender's control credit. Heartbeats are skipped (the handshake timeout
// bounds the wait); an abort from the sender ends it.
func (r *receiver) next(ctx context.Context) ([]byte, error) {
	for {
		cs, err := r.poll(ctx)
		if err != nil {
			return nil, err
		}
		for i, c := range cs {
			if c.Op != conn.OpRecv {
				continue
			}
			msg := append([]byte(nil), r.c.RecvBuf(c.Buf)[:c.Len]...)
			r.repost(c.Buf)
			body, typ, _, err := wire.ParseTrailer(msg)
			switch {
			case err != nil:
				return nil, wrap(conn.KindSetup, "handshake", fmt.Errorf("%w from the sender: is it an rdmapipe sender of the same version?", err))
			case typ == wire.MsgAbort:
				return nil, r.peerAbort(body)
			}
			if err := r.returnControl(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, r.cancelled(ctx)
				}
				return nil, wrap(conn.KindSetup, "handshake", err)
			}
			if typ == wire.MsgBeat {
				continue
			}
			r.keep(cs[i+1:])
			return msg, nil
		}
	}
}

// errFinished is the writer's way to end the receive loop once it has
// verified and confirmed the end of the stream.
var errFinished = errors.New("stream finished")

// receive handles completions: data and the end of the stream go to the
// writer in order; heartbeats are re-posted and answered at once (their
// control credit returned); an abort ends the stream. It runs until ctx ends, which the writer does with errFinished
// once it has confirmed the end of the stream.
func (r *receiver) receive(ctx context.Context, arrivals chan<- *arrival) error {
	var seq uint32
	var index uint64 // of data messages: the nonce of a keyed one's tag
	room := r.seal.Room()
	for {
		cs, err := r.poll(ctx)
		if err != nil {
			if r.peerGaveUp {
				return r.truncated(err)
			}
			return err
		}
		for _, c := range cs {
			if c.Op != conn.OpRecv {
				continue
			}
			body, typ, got, err := wire.ParseTrailer(r.c.RecvBuf(c.Buf)[:c.Len])
			if err != nil {
				return wrap(conn.KindIntegrity, "receive", err)
			}
			switch typ {
			case wire.MsgBeat:
				// The beat carries the last sequence number posted before
				// it, so it can only be behind what arrived, never ahead.
				if int32(got-seq) > 0 {
					return conn.Errorf(conn.KindIntegrity, "receive", "the sender has sent %d messages but %d arrived: messages were lost", got, seq)
				}
				r.repost(c.Buf)
				// The answer: if it cannot be sent the connection broke,
				// and Poll says so after what arrived before.
				_ = r.returnControl(ctx)
				continue
			case wire.MsgAbort:
				return r.peerAbort(body)
			case wire.MsgNext:
				if !r.endSeen {
					return conn.Errorf(conn.KindIntegrity, "receive", "the sender asked for lost hosts before the end of the stream")
				}
				r.repost(c.Buf)
				_ = r.returnControl(ctx) // as for a heartbeat
				select {
				case r.nexts <- struct{}{}:
				default:
					return conn.Errorf(conn.KindIntegrity, "receive", "the sender asked for lost hosts it was not offered")
				}
				continue
			case wire.MsgData, wire.MsgEnd:
			default:
				return conn.Errorf(conn.KindIntegrity, "receive", "unknown message type %q from the sender", typ)
			}
			seq++
			if got != seq {
				return conn.Errorf(conn.KindIntegrity, "receive", "message %d arrived where %d was expected: messages were lost or reordered", got, seq)
			}
			if typ == wire.MsgEnd && len(body) < wire.EndBody {
				return conn.Errorf(conn.KindIntegrity, "receive", "short end-of-stream message (%d bytes)", c.Len)
			}
			if typ == wire.MsgEnd && r.seal.Keyed() && len(body) < wire.EndBody+auth.MACLen {
				return conn.Errorf(conn.KindIntegrity, "receive", "end-of-stream message without the stream's MAC (%d bytes)", c.Len)
			}
			if typ == wire.MsgData && len(body) < room {
				return conn.Errorf(conn.KindIntegrity, "receive", "data message %d without its tag (%d bytes)", got, c.Len)
			}
			r.endSeen = typ == wire.MsgEnd
			if len(arrivals) > 0 {
				r.cfg.Gauges.stalled()
			}
			if !r.endSeen {
				r.cfg.Gauges.addInFlight(1)
			}
			a := &arrival{buf: c.Buf, len: len(body), seq: got, end: r.endSeen}
			if !a.end {
				index++
				a.len -= room
				m, n, at := body, a.len, index
				a.job = r.pool.Go(func() {
					w := <-r.sealers
					a.d, a.ok = w.Open(at, m, n)
					r.sealers <- w
				}, n < parallelMin && len(arrivals) == 0)
			}
			arrivals <- a
		}
	}
}

// returnControl gives the sender back the control credit of a control
// message whose spare was just re-posted.
func (r *receiver) returnControl(ctx context.Context) error {
	return r.c.SendControl(ctx, []byte{wire.CtrlReturn})
}

// truncated describes a connection that failed before the end of the stream.
func (r *receiver) truncated(err error) error {
	return wrap(conn.KindAborted, fmt.Sprintf("stream truncated after %d bytes", r.written.Load()), err)
}

// write writes each arrival's payload to w, re-posts its buffer and returns
// the credit; at the end of the stream it verifies the byte count and the
// checksum and confirms the stream to the sender. Credits go back in
// batches (see creditBatch) while more arrivals wait, and at once when
// none does. A regular file takes several writes at once (see package sink);
// buffers are still re-posted in arrival order.
func (r *receiver) write(ctx context.Context, arrivals <-chan *arrival, out sink.Sink) error {
	drained := false
	defer func() {
		if !drained {
			// Writes that finished before the stream failed are kept
			// and counted: the output holds a longer exact prefix.
			r.written.Add(out.Close(r.written.Load()))
		}
	}()
	for {
		var a *arrival
		ok := true
		switch {
		case out.Pending() >= out.Limit():
			if err := r.retire(ctx, out, len(arrivals) > 0); err != nil || ctx.Err() != nil {
				return err
			}
			continue
		case out.Pending() > 0:
			select {
			case <-out.Oldest().Done:
				if err := r.retire(ctx, out, len(arrivals) > 0); err != nil || ctx.Err() != nil {
					return err
				}
				continue
			case a, ok = <-arrivals:
			}
		default:
			a, ok = <-arrivals
		}
		if !ok && r.drain.Load() && ctx.Err() == nil {
			// The sender was lost: what arrived intact is written, and
			// another sender may take over from there.
			for out.Pending() > 0 {
				if err := r.retire(ctx, out, false); err != nil || ctx.Err() != nil {
					return err
				}
			}
			drained = true
			return nil
		}
		if !ok || ctx.Err() != nil {
			return nil // the stream is over: leave the buffers alone
		}
		payload := r.c.RecvBuf(a.buf)[:a.len]
		if a.end {
			for out.Pending() > 0 {
				if err := r.retire(ctx, out, false); err != nil || ctx.Err() != nil {
					return err
				}
			}
			if err := out.End(); err != nil {
				return &conn.Error{Kind: conn.KindAborted, Op: "write output", Err: err}
			}
			return r.finish(ctx, payload, a.seq)
		}
		a.job.Wait()
		if !a.ok {
			return conn.Errorf(conn.KindIntegrity, "verify stream", "message %d does not match its tag under the shared key: it was altered on the way, or is not from this stream (nothing of it was written)", a.seq)
		}
		r.seal.Add(a.seq, a.len, a.d)
		if r.relay != nil && r.relay.forward(ctx, a.buf, payload) != nil {
			return nil // the stream is over
		}
		out.Start(a.buf, payload)
	}
}

// retire waits for the oldest write in flight, re-posts its buffer and
// returns its credit: at once, or batched with later ones while more is
// on its way (more, or writes still in flight).
func (r *receiver) retire(ctx context.Context, out sink.Sink, more bool) error {
	w := out.Oldest()
	<-w.Done
	out.Retire()
	if w.Err != nil {
		return &conn.Error{Kind: conn.KindAborted, Op: "write output", Err: fmt.Errorf("%w (after %d bytes): the stream was cut short", w.Err, r.written.Load()+int64(w.N))}
	}
	if ctx.Err() != nil || r.relay != nil && r.relay.wait(ctx, w.Buf) != nil {
		// The stream is over (a relay's wait ends only with ctx): leave
		// the buffers alone, but count what the output holds.
		r.written.Add(int64(w.N))
		return nil
	}
	r.messages.Add(1)
	n := r.written.Add(int64(w.N))
	r.cfg.Gauges.setBytes(n)
	r.cfg.Gauges.addInFlight(-1)
	if r.cfg.Progress != nil {
		r.cfg.Progress(n)
	}
	if r.drain.Load() {
		return nil // the sender is lost: nothing to re-post or return
	}
	// A failed re-post means the connection broke: the receive loop
	// hears of that from Poll, after what arrived before it.
	r.repost(w.Buf)
	if r.pending++; r.pending < r.batch && (more || out.Pending() > 0) {
		return nil
	}
	err := r.c.SendControl(ctx, []byte{byte(r.pending)})
	r.pending = 0
	if err != nil {
		if ctx.Err() != nil || r.cfg.Rejoin != nil {
			// With Rejoin the receive loop decides what a broken
			// connection means, after what arrived before it.
			return nil
		}
		return r.sendFailed(ctx, fmt.Errorf("return a credit: %w", err))
	}
	return nil
}

// creditBatchBytes bounds the payload whose credits a batch may hold back.
const creditBatchBytes = 1 << 20

// creditBatch returns how many credits the receiver returns in one message
// while more data waits to be written: one for large chunks, where a
// message per chunk costs nothing, and up to a quarter of the window for
// small ones, holding back at most creditBatchBytes of payload, so that
// per-message costs shrink while the sender never runs short.
func creditBatch(chunk, credits int) int {
	return max(1, min(credits/4, creditBatchBytes/max(chunk, 1)))
}

// finish checks the end-of-stream message against what was written and
// confirms the stream to the sender.
func (r *receiver) finish(ctx context.Context, end []byte, seq uint32) error {
	wantBytes := int64(binary.LittleEndian.Uint64(end))
	wantSum := binary.LittleEndian.Uint64(end[8:])
	written := r.written.Load()
	sum, tag := r.seal.End(seq, written)
	if tag != nil && !hmac.Equal(end[wire.EndBody:wire.EndBody+auth.MACLen], tag) {
		return conn.Errorf(conn.KindIntegrity, "verify stream", "the stream does not match its MAC under the shared key: it was altered, reordered or cut on the way")
	}
	if wantBytes != written {
		return conn.Errorf(conn.KindIntegrity, "verify stream", "the sender sent %d bytes but %d arrived", wantBytes, written)
	}
	if tag == nil && wantSum != sum {
		return conn.Errorf(conn.KindIntegrity, "verify stream", "checksum mismatch: the sender's is %016x, the data received gives %016x", wantSum, sum)
	}
	r.sum = sum
	receivers := uint32(1)
	if r.relay != nil {
		down, lost, err := r.relay.confirmed(ctx)
		if err != nil {
			return err
		}
		receivers += uint32(down)
		r.lostDown = lost
	}
	if r.cfg.Sync != nil {
		if err := r.cfg.Sync(); err != nil {
			if ce := (*conn.Error)(nil); errors.As(err, &ce) {
				return err
			}
			return &conn.Error{Kind: conn.KindAborted, Op: "sync output", Err: fmt.Errorf("%w: the stream arrived whole but may not be on disk", err)}
		}
	}
	lost := lostText(r.lostDown)
	if err := r.sendLost(ctx, lost); err != nil {
		return err
	}
	done := make([]byte, wire.DoneLen, wire.DoneLen+auth.MACLen)
	done[0] = wire.MsgDone
	binary.LittleEndian.PutUint64(done[1:], uint64(written))
	binary.LittleEndian.PutUint32(done[9:], receivers)
	done = append(done, r.seal.Done(written, receivers, tag, lost)...)
	// Everything arrived intact and is written: if the confirmation cannot
	// be sent (the sender is gone), the sender fails, not this side.
	r.finished = true
	_ = r.c.SendControl(ctx, done)
	return nil
}

// sendLost names the lost hosts down the chain to the sender, in lost
// messages whose first byte says whether more follow: each but the first
// after the sender asked for it with a next message, so that the sender
// never has more than one to take.
func (r *receiver) sendLost(ctx context.Context, text []byte) error {
	for first := true; len(text) > 0; first = false {
		if !first {
			select {
			case <-r.nexts:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		n := min(len(text), wire.LostPiece)
		more := byte(0)
		if n < len(text) {
			more = 1
		}
		if err := r.c.SendControl(ctx, append([]byte{wire.MsgLost, more}, text[:n]...)); err != nil {
			return r.sendFailed(ctx, fmt.Errorf("name the lost hosts: %w", err))
		}
		text = text[n:]
	}
	return nil
}
