package pipe

import (
	"context"
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

// Receive writes the stream arriving on c to w, verifies it and confirms
// it to the sender: it returns nil only when every byte the sender read
// arrived intact and was written. On failure it tells the sender why
// (unless the sender gave up) and returns a *conn.Error. Receive does not
// close c; it closes the connections ReceiveConfig.Rejoin returns.
func Receive(ctx context.Context, c conn.Conn, w io.Writer, cfg ReceiveConfig) (Stats, error) {
	r := &receiver{session: newSession(c, cfg.timeouts(), "sender"), cfg: cfg, w: w, lostAsks: make(chan struct{}, 1)}
	r.end, r.reports = streamEnd{rejoin: cfg.Rejoin != nil}, make(chan endReport, 2)
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

// SparseOutput says why w cannot take a stream with ReceiveConfig.Sparse, or
// returns nil if it can: w must be an *os.File of a regular file, at an
// offset, not in append mode.
func SparseOutput(w io.Writer) error {
	return sink.CheckSparse(w)
}

// receiver receives one stream (Receive): from its first sender and
// from those that take it over (ReceiveConfig.Rejoin). Three goroutines
// share it: the receive loop (Receive's own: run, streamFrom, receive,
// takeRejoin), which owns the stream's end (end); the writer (write),
// one for each sender; and the relay's (relay.start). Each field says who
// writes it and who reads it; the writer and the relay tell the loop how
// they end only through reports.
type receiver struct {
	*session               // the loop's; the writer uses its connection and seal (see session)
	cfg      ReceiveConfig // set by Receive; read by all
	w        io.Writer     // set by Receive; the loop opens the output with it (output)
	written  atomic.Int64  // bytes written to w: the writer adds (the loop too, closing w after a failed rejoin); the loop and a rejoin's welcome read
	messages atomic.Int64  // data messages written: the writer adds, the loop reads
	// end is where the stream stands on its way to its end: only the
	// receive loop reads and writes it.
	end streamEnd
	// reports carries the writer's and the relay's events to the loop,
	// with room for every report a stream can leave unread (the last
	// writer's and the relay's), so that no reporter waits.
	reports chan endReport
	// wake ends the loop's waits on the sender, for a report that ends the
	// stream (endEvent.wakes): run sets it before the writer and the relay
	// start, they call it.
	wake  func()
	sum   uint64 // the stream's checksum (without a key): the writer sets it before its report, the loop reads it after
	probe bool   // the sender only checks the connection (Probe): the handshake sets it, the loop reads it
	// batch bounds the credits returned in one message, and pending
	// holds those held back: the writer's, set (batch) and reset
	// (pending) by the loop before a writer starts.
	batch, pending int
	// relay sends the stream on to the next receiver (RelayConfig): the
	// loop's handshake sets it and run starts it, the writer hands it
	// payloads, Receive closes it.
	relay    *relay
	repaired bool // the sender repairs the chain past this receiver: the handshake sets it, run reads it
	// drain tells the writer that the sender was lost and another may take
	// over: it writes what arrived and stops. The loop sets it before it
	// closes the arrivals, the writer reads it.
	drain atomic.Bool
	// rejoined is set once a sender from ReceiveConfig.Rejoin took over: the
	// connection is then Receive's to close. The loop's.
	rejoined bool
	// lostAsks has a token for each request for more lost hosts from the
	// sender (see sendLost): the loop sends them, the writer takes them.
	lostAsks chan struct{}
	lostDown []string          // the hosts down the chain given up, as the relay says: the writer sets it before its report, the loop reads it
	pool     *work.Pool        // checks (and decrypts) the data messages: the loop makes it and hands it jobs, the writer waits for them
	sealers  chan *seal.Worker // one for each goroutine that may check at once: the loop makes it, the jobs use it
	// id is the stream's identity and place this receiver's place in its
	// chain, as the first sender claimed them: a rejoin must claim them
	// too. The handshakes', on the loop.
	id    []byte
	place uint32
	lag   *sink.Lag // the output's lag, if it has one: the loop's (open sets it, answerReport reads it)
}

// endReport is an event of the writer or the relay for the receive loop,
// and what it says of a failure.
type endReport struct {
	event endEvent
	err   error
}

// arrival is a received message handed to the writer goroutine: the
// payload (or the end message's body) in receive buffer buf is its first
// len bytes, and job checks it. The receive loop fills it in before it
// hands it over, the job sets d and ok, the writer reads them after
// job.Wait.
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
	if err := r.cfg.check(); err != nil {
		return st, err
	}
	if err := r.handshake(parent, false); err != nil {
		e, _ := r.lossOf(parent, err)
		r.happen(e, err)
		return st, err
	}
	if r.probe {
		return st, r.endProbe(parent)
	}
	st.Info = r.c.Info() // the window, registered by the handshake, included
	start := time.Now()
	ctx, stop := context.WithCancelCause(parent)
	defer stop(nil)
	wctx, wake := context.WithCancelCause(ctx)
	defer wake(nil)
	r.wake = func() { wake(errWoken) }
	out, err := r.open(ctx)
	if err != nil {
		r.happen(evAbort, err)
		return st, err
	}
	r.happen(evWelcomed, nil)
	st.IO = out.Describe()
	if r.relay != nil {
		st.IO += ", " + r.relay.describe()
		r.relay.start(ctx, r.report)
	}
	err = r.streamFrom(ctx, wctx, stop, out)
	for r.end.state == stRejoining {
		if err = r.takeRejoin(ctx, wctx, err); err != nil {
			r.written.Store(out.Close(r.written.Load()))
			break
		}
		err = r.streamFrom(ctx, wctx, stop, out)
	}
	st.Bytes, st.Messages, st.Elapsed = r.written.Load(), r.messages.Load(), time.Since(start)
	st.Lost = r.lostDown
	if l, ok := out.(*sink.Lag); ok {
		_, st.Behind, st.Spilled = l.Backlog()
	}
	if err == nil {
		st.Sum, st.Integrity = r.sum, r.seal.Name()
		return st, nil
	}
	stop(err)
	return st, err
}

// open opens the output the stream is written to (see output), with the
// lag ctx bounds where it has one.
func (r *receiver) open(ctx context.Context) (sink.Sink, error) {
	info := r.c.Info()
	w, err := r.output()
	if err != nil {
		return nil, err
	}
	credits := conn.NewParams(info.Chunk, info.Depth).Credits()
	out, err := sink.New(w, credits, r.cfg.Sparse)
	if err != nil {
		return nil, &conn.Error{Kind: conn.KindUsage, Op: "sparse output", Err: err}
	}
	if lc := r.lagConfig(info.Chunk, credits); lc != nil {
		out = sink.WithLag(ctx, out, w, *lc)
		r.lag, _ = out.(*sink.Lag)
	}
	return out, nil
}

// lagConfig is the lag of this receiver's output (see LagConfig), or nil
// where it has none.
func (r *receiver) lagConfig(chunk, credits int) *sink.LagConfig {
	lc := r.cfg.Lag
	if lc.Memory <= 0 || r.cfg.Sparse || r.relay == nil && r.place <= 1 {
		return nil
	}
	// Leave only where the sender said it goes on past this receiver.
	// Every receive buffer may be written from: the writer copies one
	// only when the stream needs it back, all of them being written from
	// (see write), so that the output holds the stream back never, and
	// costs a copy only when it is a whole window behind.
	return &sink.LagConfig{Memory: lc.Memory, Spill: lc.Spill, Dir: lc.Dir, Block: chunk, Leave: r.repaired, Held: r.cfg.Gauges.setLag, Loans: max(1, credits)}
}

// output returns where the stream is written: w, or what ReceiveConfig.Output
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

// streamFrom receives the stream from the current sender and writes it
// to out, until its end is decided (r.end): confirmed (nil) or failed,
// or the sender lost and ReceiveConfig.Rejoin may bring another: then
// the writer has written what arrived intact, the state is stRejoining and
// the error says how the sender was lost. The loop waits on the sender
// with wctx, which a report that ends the stream wakes; stop ends ctx,
// the writer's, when the stream fails.
func (r *receiver) streamFrom(ctx, wctx context.Context, stop context.CancelCauseFunc, out sink.Sink) error {
	arrivals := make(chan *arrival, r.c.RecvBufs())
	r.pool = work.New(runtime.GOMAXPROCS(0), r.c.RecvBufs())
	defer r.pool.Close() // before the buffers go: the workers use them
	r.sealers = newSealers(r.seal)
	info := r.c.Info()
	r.batch, r.pending = creditBatch(info.Chunk, conn.NewParams(info.Chunk, info.Depth).Credits()), 0
	r.drain.Store(false)
	writeDone := make(chan struct{}) // closed after the writer's report
	go func() {
		defer close(writeDone)
		var e endEvent
		err := guard(func() (err error) {
			e, err = r.write(ctx, arrivals, out)
			return err
		})
		if err != nil {
			e = evWriterFailed
		}
		r.report(e, err)
	}()

	lost := r.receive(wctx, arrivals)
	if e, own := r.lossOf(ctx, lost); own && r.end.state.receiving() {
		r.happen(e, lost)
	}
	r.drain.Store(r.end.state == stDraining)
	close(arrivals)
	if err := r.await(ctx, stop, writeDone); err != nil || r.end.state != stRejoining {
		return err
	}
	return lost
}

// await applies the writer's and the relay's reports until the stream's
// end is decided or it awaits a rejoin. When the stream fails it ends
// the writer's context and waits for the writer, at most workerGrace:
// the error is then marked with ErrStuck.
func (r *receiver) await(ctx context.Context, stop context.CancelCauseFunc, writeDone <-chan struct{}) error {
	for {
		switch r.end.state {
		case stConfirmed, stRejoining:
			return nil
		case stFailed, stClosing:
			stop(r.end.err)
			select {
			case <-writeDone:
			case <-time.After(workerGrace):
				r.happen(evWriterStuck, nil)
				return stuckError{r.end.err}
			}
			if r.end.state == stFailed {
				return r.end.err
			}
			rep := <-r.reports // the writer's verdict is there by now
			r.happen(rep.event, rep.err)
			continue
		}
		select {
		case rep := <-r.reports:
			r.happen(rep.event, rep.err)
		case <-ctx.Done():
			r.happen(evCancel, r.cancelled(ctx))
		}
	}
}

// errWoken is the cause with which a report that ends the stream ends
// the receive loop's wait on the sender (receiver.wake).
var errWoken = errors.New("woken by a report")

// report hands the receive loop an event of the writer or the relay, and
// wakes the loop if the event ends the stream (endEvent.wakes).
func (r *receiver) report(e endEvent, err error) {
	r.reports <- endReport{event: e, err: err}
	if e.wakes() {
		r.wake()
	}
}

// happen applies event e, which err describes, to the stream's end.
func (r *receiver) happen(e endEvent, err error) { r.end = r.end.next(e, err) }

// lossOf is the receive loop's own event for err, which ended its wait
// on the sender (bounded by ctx), or false when a report woke it.
func (r *receiver) lossOf(ctx context.Context, err error) (endEvent, bool) {
	switch {
	case errors.Is(err, errWoken):
		return evAbort, false
	case ctx.Err() != nil:
		return evCancel, true
	case r.peerGaveUp || r.silent:
		return evPeerGone, true
	}
	return evAbort, true
}

// receive handles completions: data and the end of the stream go to the
// writer in order, control messages are answered at once. It runs until
// ctx ends (a report that ends the stream wakes it: receiver.wake) or the
// sender fails.
func (r *receiver) receive(ctx context.Context, arrivals chan<- *arrival) error {
	var in sequence
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
			case wire.MsgData, wire.MsgEnd:
				err = r.arrive(c, body, typ, got, &in, arrivals)
			default:
				err = r.control(ctx, c.Buf, body, typ, got, in.seq)
			}
			if err != nil {
				return err
			}
		}
	}
}

// sequence counts the messages of one sender's stream: seq all of them,
// index the data messages (the nonce of a keyed one's tag).
type sequence struct {
	seq   uint32
	index uint64
}

// control handles a message from the sender that is not data: heartbeats
// and requests for more lost hosts are re-posted and answered at once
// (their control credit returned), an abort ends the stream. seq is the
// last data or end message's sequence number.
func (r *receiver) control(ctx context.Context, buf int, body []byte, typ byte, got, seq uint32) error {
	switch typ {
	case wire.MsgAbort:
		return r.peerAbort(body)
	case wire.MsgBeat:
		// The beat carries the last sequence number posted before it,
		// so it can only be behind what arrived, never ahead.
		if int32(got-seq) > 0 {
			return conn.Errorf(conn.KindIntegrity, "receive", "the sender has sent %d messages but %d arrived: messages were lost", got, seq)
		}
		r.repost(buf)
		// If the answer cannot be sent the connection broke, and Poll
		// says so after what arrived before.
		_ = r.returnControl(ctx)
		return nil
	case wire.MsgAskReport:
		return r.answerReport(ctx, buf, got)
	case wire.MsgMoreLost:
		if !r.end.ended {
			return conn.Errorf(conn.KindIntegrity, "receive", "the sender asked for lost hosts before the end of the stream")
		}
		r.repost(buf)
		_ = r.returnControl(ctx) // as for a heartbeat
		select {
		case r.lostAsks <- struct{}{}:
			return nil
		default:
			return conn.Errorf(conn.KindIntegrity, "receive", "the sender asked for lost hosts it was not offered")
		}
	}
	return conn.Errorf(conn.KindIntegrity, "receive", "unknown message type %q from the sender", typ)
}

// arrive checks a data or end message in the order of the stream and
// hands it to the writer, with a job that checks (and decrypts) a data
// message's payload.
func (r *receiver) arrive(c conn.Completion, body []byte, typ byte, got uint32, in *sequence, arrivals chan<- *arrival) error {
	room := r.seal.Room()
	in.seq++
	switch {
	case got != in.seq:
		return conn.Errorf(conn.KindIntegrity, "receive", "message %d arrived where %d was expected: messages were lost or reordered", got, in.seq)
	case typ == wire.MsgEnd && len(body) < wire.EndBody:
		return conn.Errorf(conn.KindIntegrity, "receive", "short end-of-stream message (%d bytes)", c.Len)
	case typ == wire.MsgEnd && r.seal.Keyed() && len(body) < wire.EndBody+auth.MACLen:
		return conn.Errorf(conn.KindIntegrity, "receive", "end-of-stream message without the stream's MAC (%d bytes)", c.Len)
	case typ == wire.MsgData && len(body) < room:
		return conn.Errorf(conn.KindIntegrity, "receive", "data message %d without its tag (%d bytes)", got, c.Len)
	}
	end, e := typ == wire.MsgEnd, evData
	if end {
		e = evEnd
	}
	if r.happen(e, nil); !r.end.state.receiving() {
		return r.end.err
	}
	if len(arrivals) > 0 {
		r.cfg.Gauges.stalled()
	}
	if !end {
		r.cfg.Gauges.addInFlight(1)
	}
	a := &arrival{buf: c.Buf, len: len(body), seq: got, end: end}
	if !a.end {
		in.index++
		a.len -= room
		m, n, at := body, a.len, in.index
		a.job = r.pool.Go(func() {
			w := <-r.sealers
			a.d, a.ok = w.Open(at, m, n)
			r.sealers <- w
		}, n < parallelMin(r.seal) && len(arrivals) == 0)
	}
	arrivals <- a
	return nil
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
