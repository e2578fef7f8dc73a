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
// from those that take it over (ReceiveConfig.Rejoin).
type receiver struct {
	*session
	cfg      ReceiveConfig
	w        io.Writer
	written  atomic.Int64 // bytes written to w
	messages atomic.Int64 // data messages written
	sum      uint64       // the stream's checksum (without a key); set by finish
	endSeen  bool         // the end-of-stream message went to the writer
	finished bool         // the writer confirmed the whole stream to the sender
	probe    bool         // the sender only checks the connection (Probe)
	batch    int          // credits returned in one message at most
	pending  int          // credits held back for the next message
	relay    *relay       // towards the next receiver (RelayConfig)
	repaired bool         // the sender repairs the chain past this receiver
	// drain is set when the sender was lost and ReceiveConfig.Rejoin may bring
	// another: the writer then writes what arrived and stops.
	drain atomic.Bool
	// rejoined is set once a sender from ReceiveConfig.Rejoin took over: the
	// connection is then Receive's to close.
	rejoined bool
	// lostAsks has a token for each request for more lost hosts from the
	// sender (see sendLost).
	lostAsks chan struct{}
	lostDown []string          // the hosts down the chain given up, as the relay says
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
	if err := r.cfg.check(); err != nil {
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
	if lc := r.lagConfig(info.Chunk, conn.NewParams(info.Chunk, info.Depth).Credits()); lc != nil {
		out = sink.WithLag(ctx, out, w, *lc)
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
			r.written.Store(out.Close(r.written.Load()))
			break
		}
		err = r.streamFrom(ctx, out)
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
	cancel(err)
	return st, err
}

// lagConfig is the lag of this receiver's output (see LagConfig), or nil
// where it has none.
func (r *receiver) lagConfig(chunk, credits int) *sink.LagConfig {
	lc := r.cfg.Lag
	if lc.Memory <= 0 || r.cfg.Sparse || r.relay == nil && r.place <= 1 {
		return nil
	}
	// Leave only where the sender said it goes on past this receiver.
	// Half the receive buffers may be written from while the output keeps
	// up; the rest take the stream meanwhile.
	return &sink.LagConfig{Memory: lc.Memory, Spill: lc.Spill, Dir: lc.Dir, Block: chunk, Leave: r.repaired, Held: r.cfg.Gauges.setLag, Loans: max(1, credits/2)}
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
// to out, until its end (nil) or a failure. When the sender is lost and
// ReceiveConfig.Rejoin may bring another, the writer first writes what arrived
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

// errFinished is the writer's way to end the receive loop once it has
// verified and confirmed the end of the stream.
var errFinished = errors.New("stream finished")

// receive handles completions: data and the end of the stream go to the
// writer in order, control messages are answered at once. It runs until
// ctx ends, which the writer does with errFinished once it has confirmed
// the end of the stream.
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
	case wire.MsgMoreLost:
		if !r.endSeen {
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
	r.endSeen = typ == wire.MsgEnd
	if len(arrivals) > 0 {
		r.cfg.Gauges.stalled()
	}
	if !r.endSeen {
		r.cfg.Gauges.addInFlight(1)
	}
	a := &arrival{buf: c.Buf, len: len(body), seq: got, end: r.endSeen}
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
