package pipe

import (
	"context"
	"crypto/hmac"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/source"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
	"github.com/rdmapipe/rdmapipe/pipe/internal/work"
)

// sender streams to one receiver over one connection: Send's, a relay's
// towards its next receiver, or a link's taker-over. A reader goroutine
// fills send buffer k+1 while buffer k is on the wire, workers on every
// core seal the buffers read, a poster goroutine posts them in order, and
// the stream's goroutine (the one that calls stream: Send's, the
// relay's) handles completions and credits; a heartbeat goroutine speaks
// when the receiver is silent. "The poster" below is whichever of the
// poster and the reader posts a message (postMessage: never both at
// once). Each field says who writes it and who reads it.
type sender struct {
	*session              // the stream goroutine's; the heartbeat reads heard, all use c
	cfg      streamConfig // set by the sender's maker; read by all
	chunk    int          // set by stream before the reader starts; read by it
	// free holds the send buffers ready to be filled: the stream
	// goroutine puts back those whose sends completed, the reader takes.
	free chan int
	// credits has one token per receive buffer the receiver has posted
	// for us: the stream goroutine puts returned ones, the poster takes.
	credits chan struct{}
	// ctrl has one token per spare the receiver has posted for a control
	// message: the stream goroutine puts returned ones, the handshake, the
	// heartbeat and askMoreLost take.
	ctrl     chan struct{}
	sent     atomic.Int64  // bytes handed to the wire: the poster adds; the stream goroutine, a link and Send read
	messages atomic.Int64  // data messages handed to the wire: the poster adds, the stream goroutine reads
	posted   atomic.Uint32 // sequence number of the last message posted: the poster stores, the heartbeat reads
	spoke    atomic.Int64  // when a message was last posted (UnixNano): the poster, the heartbeat and askMoreLost store, the heartbeat reads
	queued   atomic.Int64  // messages handed to the poster and not yet posted: the reader adds, the poster takes off
	ended    atomic.Bool   // the end-of-stream message is being posted: the poster sets, the stream goroutine reads
	// sum is the stream's checksum (without a key), tag its MAC (with
	// one): the poster sets them with ended, the stream goroutine reads
	// them once the reader and the poster are done.
	sum     uint64
	tag     []byte
	sealers chan *seal.Worker // one for each goroutine that may seal at once: stream makes it, the sealing jobs use it
	// receivers counts the receivers that confirmed the whole stream, hop
	// by hop: the stream goroutine sets it from the confirmation; Send, a
	// link and the relay read it after the stream.
	receivers int
	// fwd is a relay's zero-copy path (nil: sends from its own buffers):
	// relay.adopt sets it in the handshake, before the stream; the
	// reader, the poster, the stream goroutine and the upstream
	// receiver's writer (relay.wait) read it.
	fwd *forwarding
	pos position // set by the sender's maker before the handshake; read by the handshake and the confirmation
	// lostHosts is what the receiver says of the hosts lost down the
	// chain: the stream goroutine's; Send, a link and the relay read
	// its names after the stream.
	lostHosts lostReport
	// asked numbers the asks for a host report (see askReports), and
	// asking says the last is unanswered: askReports sets them, the
	// stream goroutine reads them and clears asking.
	asked  atomic.Uint32
	asking atomic.Bool
}

// forwarding lets a relay's sender send data from the receive buffers of
// the connection it relays from (see relay.adopt).
type forwarding struct {
	conn.Forwarder
	from conn.Conn
	// done is called with each buffer's index twice: once its send
	// completed, once the poster has posted it (in either order).
	done func(buf int)
}

// position is where a sender's receiver stands in the stream's chain.
type position struct {
	id    []byte   // the stream's identity; a first handshake chooses it
	place uint32   // the receiver's place in the chain, from 1
	down  []string // the receivers after it, as far as known
	whole bool     // down names them all (see checkConfirmation)
}

// setDown sets the receivers after the receiver: chain, the rest of the
// chain if whole; else chain, or when it is empty the fallbacks.
func (p *position) setDown(chain []string, whole bool, fallback []Hop) {
	p.down, p.whole = chain, whole
	if len(chain) == 0 {
		for _, h := range fallback {
			p.down = append(p.down, h.Addr)
		}
	}
}

// newSender returns a sender towards peer on c, holding every control
// credit.
func newSender(c conn.Conn, cfg streamConfig, t timeouts, peer string) *sender {
	s := &sender{session: newSession(c, t, peer), cfg: cfg, ctrl: make(chan struct{}, conn.ControlCredits)}
	for range conn.ControlCredits {
		s.ctrl <- struct{}{}
	}
	return s
}

// failed tells the receiver why the sender gave up, unless the receiver is
// the one that did.
func (s *sender) failed(err error) {
	if err != nil && !s.peerGaveUp {
		body := wire.AbortMessage(make([]byte, 0, conn.MaxControl), conn.KindOf(err), err.Error(), conn.TrailerLen)
		lastWords(s.c, wire.AppendTrailer(body, wire.MsgAbort, 0))
	}
}

// drop gives up the receiver after err: it is told why, and the
// connection, which the sender's maker owns, closed.
func (s *sender) drop(err error) {
	s.failed(err)
	s.release()
	s.c.Close()
}

// stream sends what the source open returns reads, after the handshake,
// and waits for the receiver's confirmation.
func (s *sender) stream(ctx context.Context, open func(source.Buffers) source.Source) (Stats, error) {
	info := s.c.Info()
	st := Stats{Info: info}
	start := time.Now()
	s.chunk = info.Chunk
	s.free = make(chan int, s.c.SendBufs())
	bufs := make([][]byte, s.c.SendBufs())
	for i := range bufs {
		bufs[i] = s.c.SendBuf(i)
		if i < info.Depth {
			s.free <- i
		}
	}
	src := open(source.Buffers{Free: s.free, Bufs: bufs, Chunk: s.chunk})
	credits := conn.NewParams(info.Chunk, info.Depth).Credits()
	s.credits = make(chan struct{}, credits)
	for range credits {
		s.credits <- struct{}{}
	}

	ctx, cancel := context.WithCancelCause(ctx)
	s.spoken()
	var beats sync.WaitGroup
	beats.Go(func() { s.heartbeat(ctx, cancel) })
	if s.cfg.view != nil && s.seal.Keyed() {
		beats.Go(func() { s.askReports(ctx, cancel) })
	}
	defer beats.Wait()
	defer cancel(nil)
	st.IO = src.Describe()
	pool := work.New(runtime.GOMAXPROCS(0), s.c.SendBufs())
	defer pool.Close() // before the buffers go: the workers use them
	s.sealers = newSealers(s.seal)
	readDone := make(chan struct{}) // the reader and the poster are done
	go func() {
		defer close(readDone)
		msgs := make(chan *message, s.c.SendBufs())
		var poster sync.WaitGroup
		poster.Go(func() {
			if err := guard(func() error { return s.post(ctx, msgs) }); err != nil {
				cancel(err)
			}
		})
		if err := guard(func() error { return s.read(ctx, src, pool, msgs) }); err != nil {
			cancel(err)
		}
		close(msgs)
		poster.Wait()
		src.Close(s.sent.Load())
	}()

	err := s.complete(ctx, readDone)
	st.Bytes, st.Messages, st.Elapsed = s.sent.Load(), s.messages.Load(), time.Since(start)
	if err != nil {
		cancel(err)
		return st, settle(err, readDone)
	}
	st.Sum, st.Integrity = s.sum, s.seal.Name()
	st.Receivers = s.receivers
	return st, nil
}

// heartbeat sends a heartbeat whenever the receiver has been silent for
// beatInterval, or this side has posted nothing for as long, and the last
// heartbeat was answered (its control credit is back), until ctx ends: so
// none while data flows, at most one in flight, and neither side's idle
// timeout fires while the other is there (a receiver that still returns
// credits after the end of the stream hears nothing else from this side).
// The heartbeat carries the sequence number of the last message posted
// before it, so that the receiver notices lost messages even when nothing
// else follows them. One that cannot be sent fails the stream through fail.
func (s *sender) heartbeat(ctx context.Context, fail func(error)) {
	every := beatInterval(s.timeouts.silence)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		quiet := s.lastHeard()
		if spoke := time.Unix(0, s.spoke.Load()); spoke.Before(quiet) {
			quiet = spoke
		}
		wait := time.Until(quiet.Add(every))
		if wait <= 0 {
			select {
			case <-s.ctrl:
				if err := s.c.SendControl(ctx, wire.AppendTrailer(nil, wire.MsgBeat, s.posted.Load())); err != nil {
					if ctx.Err() == nil {
						fail(s.sendFailed(ctx, err))
					}
					return
				}
				s.spoken()
			default: // the last one is still unanswered
			}
			wait = every
		}
		t.Reset(wait)
	}
}

// spoken records that a message was just posted to the receiver.
func (s *sender) spoken() { s.spoke.Store(time.Now().UnixNano()) }

// returned takes the credits a single-byte message from the receiver
// returns: data credits in its low bits, a control credit in ctrlReturn.
// A failure is of kind k: what a broken or forged message means here.
func (s *sender) returned(b byte, k conn.Kind) error {
	if b == 0 {
		return conn.Errorf(k, "credit", "the receiver returned no credit in a credit message")
	}
	for range b &^ wire.CtrlReturn {
		select {
		case s.credits <- struct{}{}:
			s.cfg.gauges.addInFlight(-1)
		default:
			return conn.Errorf(k, "credit", "the receiver returned more credits than it granted: its messages were damaged or forged")
		}
	}
	if b&wire.CtrlReturn != 0 {
		select {
		case s.ctrl <- struct{}{}:
		default:
			return conn.Errorf(k, "credit", "the receiver returned more control credits than it granted: its messages were damaged or forged")
		}
	}
	return nil
}

// complete handles completions until the receiver confirms the whole
// stream: finished sends free their buffers, credit messages return credits.
func (s *sender) complete(ctx context.Context, readDone <-chan struct{}) error {
	for {
		cs, err := s.poll(ctx)
		if err != nil {
			return err
		}
		for _, c := range cs {
			switch c.Op {
			case conn.OpSend:
				s.free <- c.Buf
				continue
			case conn.OpForward:
				s.fwd.done(c.Buf)
				continue
			}
			msg := s.c.RecvBuf(c.Buf)[:c.Len]
			done, err := s.control(msg, readDone)
			if err != nil {
				return err
			}
			if done {
				return nil
			}
			s.repost(c.Buf)
			if err := s.askMoreLost(ctx); err != nil {
				return err
			}
		}
	}
}

// control handles one message from the receiver and reports whether it
// confirmed the end of the stream.
func (s *sender) control(msg []byte, readDone <-chan struct{}) (bool, error) {
	switch {
	case len(msg) == 1:
		return false, s.returned(msg[0], conn.KindIntegrity)
	case len(msg) == 0:
		return false, conn.Errorf(conn.KindIntegrity, "receive", "empty message from the receiver")
	case msg[0] == wire.MsgAbort:
		return false, s.peerAbort(msg[1:])
	case msg[0] == wire.MsgReport:
		return false, s.takeReport(msg)
	case msg[0] == wire.MsgLost:
		return false, s.lostHosts.add(msg, s.ended.Load())
	case msg[0] == wire.MsgDone:
		if s.lostHosts.more {
			return false, conn.Errorf(conn.KindIntegrity, "finish", "the receiver confirmed the stream before it named every lost host")
		}
		if !s.ended.Load() {
			return false, conn.Errorf(conn.KindIntegrity, "finish", "the receiver confirmed the end of a stream this sender has not finished")
		}
		<-readDone // the poster returns right after posting the end
		return true, s.confirmed(msg)
	}
	return false, conn.Errorf(conn.KindIntegrity, "receive", "unexpected message %s from the receiver", wire.Describe(msg))
}

// confirmed checks the receiver's confirmation of the whole stream: its
// byte count and, with a key, its MAC.
func (s *sender) confirmed(msg []byte) error {
	want := wire.DoneLen
	if s.seal.Keyed() {
		want += auth.MACLen
	}
	if len(msg) < want {
		return conn.Errorf(conn.KindIntegrity, "finish", "short confirmation from the receiver (%d bytes)", len(msg))
	}
	got, sent := int64(binary.LittleEndian.Uint64(msg[1:])), s.sent.Load()
	receivers := binary.LittleEndian.Uint32(msg[9:])
	if s.seal.Keyed() && !hmac.Equal(msg[wire.DoneLen:wire.DoneLen+auth.MACLen], s.seal.Done(got, receivers, s.tag, s.lostHosts.text)) {
		return conn.Errorf(conn.KindIntegrity, "finish", "the receiver's confirmation does not carry the stream key's MAC: it was forged or damaged")
	}
	if got != sent {
		return conn.Errorf(conn.KindIntegrity, "finish", "the receiver wrote %d bytes but %d were sent", got, sent)
	}
	s.lostHosts.names = lostNames(s.lostHosts.text)
	if err := checkConfirmation(receivers, s.lostHosts.names, s.pos.down, s.pos.whole); err != nil {
		return conn.Errorf(conn.KindIntegrity, "finish", "the receiver's confirmation %v", err)
	}
	s.receivers = int(receivers)
	if s.cfg.view != nil {
		s.cfg.view.settle()
	}
	return nil
}

// credit waits for a credit to send a filled buffer with.
func (s *sender) credit(ctx context.Context) error {
	select {
	case <-s.credits:
	default:
		s.cfg.gauges.stalled()
		select {
		case <-s.credits:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	s.cfg.gauges.addInFlight(1)
	return nil
}
