package pipe

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
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

// Send streams r to the receiver at the other end of c and returns when the
// receiver has confirmed that it wrote every byte, or on the first failure.
// On failure it tells the receiver why (unless the receiver is the one that
// gave up) and returns a *conn.Error. Send does not close c.
//
// With Config.Repair, a receiver that fails mid-stream is given up and
// the stream goes on with the first of Config.Fallback that takes it over
// (Send closes the connections it makes for that): Send then returns nil
// when every receiver not given up confirmed the stream, with those given
// up, here or down the chain, in Stats.Lost; a caller that must tell a
// whole chain from a repaired one checks it. When no receiver is left it
// fails (KindAborted), naming them all.
//
// A reader goroutine fills send buffer k+1 from r while buffer k is on the
// wire, workers on every core seal the buffers read (see package seal), a
// poster goroutine posts them in order, and this goroutine handles
// completions and credits.
func Send(ctx context.Context, c conn.Conn, r io.Reader, cfg Config) (Stats, error) {
	s := newSender(c, cfg, "receiver")
	s.r = r
	s.setDown(cfg.Chain, len(cfg.Chain) > 0, cfg.Fallback)
	var st Stats
	err := guard(func() (err error) {
		st, err = s.run(ctx)
		return err
	})
	last := s
	if s.link != nil {
		last = s.link.s
		if s.link.owned && !errors.Is(err, ErrStuck) {
			defer last.c.Close()
		}
		st.Lost = s.link.confirmedLost()
		if errors.Is(err, errNoneLeft) {
			err = conn.Errorf(conn.KindAborted, "", "every receiver was lost (%s)", strings.Join(st.Lost, ", "))
		}
	} else {
		st.Lost = s.lostDown
	}
	st.Began = s.began.Load()
	defer last.release()
	last.failed(err)
	return st, err
}

// setDown sets the receivers after this sender's: chain, the rest of
// the chain if whole; else chain, or when it is empty the fallbacks,
// which are among them.
func (s *sender) setDown(chain []string, whole bool, fallback []Hop) {
	s.down, s.whole = chain, whole
	if len(chain) == 0 {
		for _, h := range fallback {
			s.down = append(s.down, h.Addr)
		}
	}
}

// failed tells the receiver why the sender gave up, unless the receiver is
// the one that did.
func (s *sender) failed(err error) {
	if err != nil && !s.peerGaveUp {
		body := wire.AbortMessage(make([]byte, 0, conn.MaxControl), conn.KindOf(err), err.Error(), conn.TrailerLen)
		lastWords(s.c, wire.AppendTrailer(body, wire.MsgAbort, 0))
	}
}

// sender is the state of one Send.
type sender struct {
	*session
	r        io.Reader
	chunk    int
	free     chan int      // send buffers ready to be filled
	credits  chan struct{} // one token per receive buffer the receiver has posted for us
	ctrl     chan struct{} // one token per spare the receiver has posted for a control message
	sent     atomic.Int64  // bytes handed to the wire by the poster goroutine
	messages atomic.Int64  // data messages handed to the wire
	posted   atomic.Uint32 // sequence number of the last message posted
	ended    atomic.Bool   // the end-of-stream message is being posted
	sum      uint64        // the stream's checksum (without a key); set with ended
	tag      []byte        // the stream's tag (with a key); set with ended
	probe    bool          // only the handshake (Probe)
	began    atomic.Bool   // the input was opened (Stats.Began)
	// receivers is how many receivers confirmed the whole stream: the
	// receiver and every one down its chain, counted hop by hop.
	receivers int
	// A relay's sender with forward set sends data from forwardFrom's
	// receive buffers (see relay) and calls onForward with each one's
	// index twice: once its send completed, once the poster has posted it
	// (the two may come in either order).
	sealers     chan *seal.Worker // one for each goroutine that may seal at once
	queued      atomic.Int64      // messages handed to the poster and not yet posted
	forward     conn.Forwarder
	forwardFrom conn.Conn
	onForward   func(buf int)
	// rejoin makes the handshake take over a stream the receiver has
	// begun (see Config.Rejoin); it then sets written, the bytes the
	// receiver says it has written.
	rejoin  bool
	written int64
	// id is the stream's identity and place the receiver's place in its
	// chain, which the auth message claims; a sender given none is a
	// stream's first, and its handshake chooses an identity, at place 1.
	id    []byte
	place uint32
	// down names the receivers after the one this sender sends to, as far
	// as it knows them; whole says they are all of them (a chain named by
	// the sender): see checkConfirmation.
	down  []string
	whole bool
	// lostText is what the receiver's lost messages said so far (not
	// nil once one came), lostMore whether the last said more follow,
	// and nexts how many of them await the next message that asks for
	// more.
	lostText []byte
	lostMore bool
	nexts    int
	// lostDown names the receivers down the chain given up, as the
	// confirmation says.
	lostDown []string
	// link, for Send with Config.Repair, is the repairing stream.
	link *link
}

// newSender returns a sender towards peer on c, holding every control
// credit.
func newSender(c conn.Conn, cfg Config, peer string) *sender {
	s := &sender{session: newSession(c, cfg, peer), ctrl: make(chan struct{}, conn.ControlCredits)}
	for range conn.ControlCredits {
		s.ctrl <- struct{}{}
	}
	return s
}

func (s *sender) run(ctx context.Context) (Stats, error) {
	if err := checkRepair(s.cfg); err != nil {
		return Stats{Info: s.c.Info()}, err
	}
	if err := s.handshake(ctx); err != nil {
		return Stats{Info: s.c.Info()}, err
	}
	open := func(b source.Buffers) source.Source {
		s.began.Store(true)
		return source.New(s.r, b)
	}
	if !s.cfg.Repair && len(s.cfg.Fallback) == 0 {
		return s.stream(ctx, open)
	}
	cfg := s.cfg
	if len(cfg.Fallback) == 0 {
		for _, h := range cfg.Chain {
			cfg.Fallback = append(cfg.Fallback, Hop{Addr: h})
		}
	}
	s.link = newLink(cfg, s, s.c.Info().Remote, false)
	return s.link.run(ctx, open)
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
	var beats sync.WaitGroup
	beats.Go(func() { s.heartbeat(ctx, cancel) })
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
// beatInterval and the last heartbeat was answered (its control credit is
// back), until ctx ends: so none while data flows, at most one in flight,
// and the receiver's idle timeout fires only when this side is really gone.
// The heartbeat carries the sequence number of the last message posted
// before it, so that the receiver notices lost messages even when nothing
// else follows them. One that cannot be sent fails the stream through fail.
func (s *sender) heartbeat(ctx context.Context, fail func(error)) {
	every := beatInterval(s.cfg.Timeout)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wait := time.Until(s.lastHeard().Add(every))
		if wait <= 0 {
			select {
			case <-s.ctrl:
				if err := s.c.SendControl(ctx, wire.AppendTrailer(nil, wire.MsgBeat, s.posted.Load())); err != nil {
					if ctx.Err() == nil {
						fail(s.sendFailed(ctx, err))
					}
					return
				}
			default: // the last one is still unanswered
			}
			wait = every
		}
		t.Reset(wait)
	}
}

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
			s.cfg.Gauges.addInFlight(-1)
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

// handshakeControl sends a control message during the handshake, once a
// control credit is back.
func (s *sender) handshakeControl(ctx context.Context, msg []byte) error {
	if len(s.ctrl) == 0 {
		if _, err := s.controlMessage(ctx, 0, 0); err != nil {
			return err
		}
	}
	<-s.ctrl
	return s.c.SendControl(ctx, msg)
}

// handshake waits for the receiver's hello, proves the key (if any) and
// waits for the receiver's welcome, all within the handshake timeout.
func (s *sender) handshake(parent context.Context) error {
	factor := 1
	if !s.probe && len(s.cfg.Chain) > 0 {
		factor = 2 // the set-up down the chain is bounded by one timeout
	}
	ctx, cancel := s.handshakeContext(parent, "no rdmapipe handshake from the receiver: is an rdmapipe receiver of the same version listening there?", factor)
	defer cancel()
	hello, err := s.controlMessage(ctx, wire.MsgHello, 1+auth.NonceLen)
	if err != nil {
		return err
	}
	theirFlags := hello[1]
	haveKey := len(s.cfg.Key) > 0
	switch {
	case theirFlags&wire.FlagKey != 0 && !haveKey:
		return conn.Errorf(conn.KindAuth, "authenticate", "the receiver requires a shared key")
	case theirFlags&wire.FlagKey == 0 && haveKey:
		return conn.Errorf(conn.KindAuth, "authenticate", "this sender has a key but the receiver has none: give the receiver the same key")
	}
	nonce, err := auth.NewNonce()
	if err == nil && s.place == 0 {
		s.id, s.place = make([]byte, wire.StreamIDLen), 1
		_, err = rand.Read(s.id)
	}
	if err != nil {
		return conn.Errorf(conn.KindInternal, "authenticate", "random nonce or stream identity: %v", err)
	}
	body := make([]byte, wire.AuthBody)
	copy(body[wire.AuthID:], s.id)
	binary.LittleEndian.PutUint32(body[wire.AuthPlace:], s.place)
	var chain []string
	switch {
	case s.probe:
		body[0] = wire.FlagProbe
	case s.rejoin:
		body[0] = wire.FlagRejoin
	case len(s.cfg.Chain) > 0:
		if err := wire.CheckChain(s.cfg.Chain); err != nil {
			return conn.Errorf(conn.KindUsage, "chain of receivers", "%v", err)
		}
		body[0], chain = wire.FlagChain, s.cfg.Chain
		if s.cfg.Repair || len(s.cfg.Fallback) > 0 {
			body[0] |= wire.FlagRepair
		}
	}
	if s.cfg.Encrypt {
		if !haveKey {
			return conn.Errorf(conn.KindUsage, "encrypt", "encryption needs a shared key")
		}
		body[0] |= wire.FlagEncrypt
	}
	copy(body[wire.AuthNonce:], nonce[:])
	var t []byte
	if haveKey {
		body[0] |= wire.FlagKey
		t = auth.Transcript(s.c.Info(), hello[:2+auth.NonceLen], body[0], nonce[:], s.id, s.place, chain)
		copy(body[wire.AuthMAC:], auth.Proof(s.cfg.Key, auth.SenderProof, t))
	}
	if err := s.handshakeControl(ctx, wire.AppendTrailer(body, wire.MsgAuth, 0)); err != nil {
		return wrap(conn.KindSetup, "send authentication", err)
	}
	if chain != nil {
		if err := s.sendChain(ctx); err != nil {
			return err
		}
	}
	var written []byte // a rejoin's: the receiver's written count
	if s.rejoin {
		written = make([]byte, wire.WrittenLen)
	}
	welcome, err := s.controlMessage(ctx, wire.MsgWelcome, 1+len(written)+auth.MACLen)
	if err != nil {
		return err
	}
	written = welcome[2 : 2+len(written)]
	proof := welcome[2+len(written) : 2+len(written)+auth.MACLen]
	desc := welcome[2+len(written)+auth.MACLen:]
	if haveKey {
		if !auth.ValidProof(s.cfg.Key, auth.ReceiverProof, t, proof, written, desc) {
			return conn.Errorf(conn.KindAuth, "authenticate", "the receiver's key proof is wrong: it holds a different key, or the handshake was altered on the way")
		}
		s.seal = seal.NewKeyed(auth.StreamKey(s.cfg.Key, t), s.cfg.Encrypt)
	} else {
		s.seal = seal.New(streamID(hello[2:2+auth.NonceLen], nonce[:]))
	}
	if s.rejoin {
		s.written = int64(binary.LittleEndian.Uint64(written))
	}
	if ws, ok := s.c.(conn.WindowSetter); ok && !s.probe {
		if err := ws.SetWindow(desc); err != nil {
			return wrap(conn.KindSetup, "the receiver's window", err)
		}
	}
	s.authenticated = true
	return nil
}

// controlMessage waits for a control message of type typ with at least
// size bytes after the type byte, copies it out and re-posts its buffer;
// with typ 0 it waits until a control credit is back instead. Credits are
// taken as they come; an abort from the receiver ends the wait with the
// receiver's reason.
func (s *sender) controlMessage(ctx context.Context, typ byte, size int) ([]byte, error) {
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
			switch {
			case len(msg) == 1:
				if err := s.returned(msg[0], conn.KindSetup); err != nil {
					return nil, err
				}
				if typ != 0 || len(s.ctrl) == 0 {
					continue
				}
				msg = nil
			case len(msg) > 0 && msg[0] == wire.MsgAbort:
				return nil, s.peerAbort(msg[1:])
			case len(msg) == 0 || msg[0] != typ || len(msg) < 1+size:
				return nil, conn.Errorf(conn.KindSetup, "handshake", "unexpected message %s from the receiver: is it an rdmapipe receiver of the same version?", wire.Describe(msg))
			}
			s.keep(cs[i+1:])
			return msg, nil
		}
	}
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
				s.onForward(c.Buf)
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
			if err := s.askNext(ctx); err != nil {
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
	case msg[0] == wire.MsgLost:
		// Kept, bounded, until the confirmation's MAC vouches for it.
		switch {
		case !s.ended.Load():
			return false, conn.Errorf(conn.KindIntegrity, "finish", "the receiver named lost hosts before the end of the stream")
		case s.nexts > 0:
			return false, conn.Errorf(conn.KindIntegrity, "finish", "the receiver named lost hosts without waiting for the sender")
		case !s.lostMore && s.lostText != nil:
			return false, conn.Errorf(conn.KindIntegrity, "finish", "the receiver named lost hosts after its last lost message")
		case len(msg) < 2 || len(s.lostText)+len(msg)-2 > wire.MaxLost:
			return false, conn.Errorf(conn.KindIntegrity, "finish", "a lost message of %d bytes: empty, or more than %d bytes of lost hosts in all", len(msg), wire.MaxLost)
		}
		if s.lostText == nil {
			s.lostText = []byte{}
		}
		s.lostText = append(s.lostText, msg[2:]...)
		if s.lostMore = msg[1] != 0; s.lostMore {
			s.nexts++
		}
		return false, nil
	case msg[0] == wire.MsgDone:
		if s.lostMore {
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

// askNext asks the receiver for its next lost message, if one is due and a
// control credit is there for it; else a returned credit calls it again.
func (s *sender) askNext(ctx context.Context) error {
	if s.nexts == 0 {
		return nil
	}
	select {
	case <-s.ctrl:
	default:
		return nil
	}
	s.nexts--
	if err := s.c.SendControl(ctx, wire.AppendTrailer(nil, wire.MsgNext, 0)); err != nil {
		return s.lost(err)
	}
	return nil
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
	if s.seal.Keyed() && !hmac.Equal(msg[wire.DoneLen:wire.DoneLen+auth.MACLen], s.seal.Done(got, receivers, s.tag, s.lostText)) {
		return conn.Errorf(conn.KindIntegrity, "finish", "the receiver's confirmation does not carry the stream key's MAC: it was forged or damaged")
	}
	if got != sent {
		return conn.Errorf(conn.KindIntegrity, "finish", "the receiver wrote %d bytes but %d were sent", got, sent)
	}
	s.lostDown = lostNames(s.lostText)
	if err := checkConfirmation(receivers, s.lostDown, s.down, s.whole); err != nil {
		return conn.Errorf(conn.KindIntegrity, "finish", "the receiver's confirmation %v", err)
	}
	s.receivers = int(receivers)
	return nil
}

// checkConfirmation checks what a confirmation says of the receivers down
// the chain, against down, the names of those after the receiver as far
// as the sender knows them (all of them when whole): the receivers it
// counts and the names of those given up (lost) must cover the receiver
// and every one of down, and with the whole chain known no more; each
// lost name must then be one of down's, each at most once.
func checkConfirmation(receivers uint32, lost, down []string, whole bool) error {
	if whole {
		left := append([]string(nil), down...)
		for _, name := range lost {
			i := slices.IndexFunc(left, func(h string) bool { return shortName(h) == name })
			if i < 0 {
				return fmt.Errorf("names %q as lost, which is not a receiver after it in the chain", name)
			}
			left = slices.Delete(left, i, i+1)
		}
	}
	want, got := int64(1+len(down)), int64(receivers)+int64(len(lost))
	if got < want || whole && got > want {
		return fmt.Errorf("counts %d receivers and %d lost, of the %d from it to the end of the chain", receivers, len(lost), want)
	}
	return nil
}

// message is a filled buffer on its way to the wire: the reader queues it
// with the job that seals it, the poster posts it once the job has run.
type message struct {
	buf, n int // the buffer and its payload's length; 0 for the end of the stream
	seq    uint32
	job    *work.Job   // seals it: sets d
	d      seal.Digest // the payload's digest
	rerr   error       // the input's error after the payload
}

// parallelMin is the payload below which sealing a message is not worth a
// hand-over to a worker when nothing waits before it: the goroutine that
// takes the message seals it itself, which keeps a line typed into a
// stream from waking a worker on its way.
const parallelMin = 128 << 10

// newSealers returns a seal.Worker for every goroutine that may seal or
// open a message at once: the pool's workers and the one that waits for
// a job.
func newSealers(st *seal.Stream) chan *seal.Worker {
	n := runtime.GOMAXPROCS(0) + 1
	ws := make(chan *seal.Worker, n)
	for range n {
		ws <- st.Worker()
	}
	return ws
}

// buf is the buffer data message i is sent from: a send buffer, or a
// receive buffer of the connection a relay forwards from.
func (s *sender) buf(i int) []byte {
	if s.forward != nil {
		return s.forwardFrom.RecvBuf(i)
	}
	return s.c.SendBuf(i)
}

// read fills send buffers from the source and hands them to the poster,
// each with a job for the pool that seals it, then the end of the stream.
// A small message with nothing queued before it (a line typed into the
// stream) it seals and posts itself, sparing it two hand-overs.
func (s *sender) read(ctx context.Context, src source.Source, pool *work.Pool, msgs chan<- *message) error {
	var seq uint32
	var index uint64 // of data messages: the nonce of a keyed one's tag
	var read int64
	room := s.seal.Room()
	for {
		i, n, eof, rerr := src.Next(ctx)
		if ctx.Err() != nil {
			return context.Cause(ctx) // the stream is over: leave the buffer alone
		}
		if n == 0 && !eof {
			return conn.Errorf(conn.KindAborted, "read input", "%v (after %d bytes)", rerr, read)
		}
		seq++
		m := &message{buf: i, n: n, seq: seq, rerr: rerr}
		// The poster is idle when nothing is queued, and only this
		// goroutine queues: then the message may skip it.
		direct := n < parallelMin && s.queued.Load() == 0
		if n > 0 {
			index++
			read += int64(n)
			b, at := s.buf(i)[:n+room], index
			m.job = pool.Go(func() {
				w := <-s.sealers
				m.d = w.Seal(at, b, n)
				s.sealers <- w
			}, direct)
		}
		if direct {
			if _, err := s.postMessage(ctx, m); err != nil || n == 0 {
				return err
			}
			continue
		}
		s.queued.Add(1)
		select {
		case msgs <- m:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if n == 0 || rerr != nil {
			return nil
		}
	}
}

// post posts the messages the reader queued, in order.
func (s *sender) post(ctx context.Context, msgs <-chan *message) error {
	for m := range msgs {
		end, err := s.postMessage(ctx, m)
		if err != nil || end {
			return err
		}
		s.queued.Add(-1)
	}
	return nil // the reader failed, and said why
}

// postMessage posts message m once it is sealed and a credit is there for
// it, and reports whether it was the end of the stream, which carries the
// byte count and the stream's checksum or tag. The poster calls it, or
// the reader when the poster is idle: never both at once.
func (s *sender) postMessage(ctx context.Context, m *message) (end bool, err error) {
	if m.job != nil {
		m.job.Wait()
	}
	if err := s.credit(ctx); err != nil {
		return false, err
	}
	if m.n == 0 {
		buf := s.c.SendBuf(m.buf)
		s.sum, s.tag = s.seal.End(m.seq, s.sent.Load())
		binary.LittleEndian.PutUint64(buf, uint64(s.sent.Load()))
		binary.LittleEndian.PutUint64(buf[8:], s.sum)
		size := wire.EndBody + copy(buf[wire.EndBody:], s.tag)
		wire.PutTrailer(buf[size:], wire.MsgEnd, m.seq)
		s.ended.Store(true)
		if err := s.c.PostSend(m.buf, size+conn.TrailerLen); err != nil {
			return true, s.sendFailed(ctx, err)
		}
		s.posted.Store(m.seq)
		return true, nil
	}
	post := s.c.PostSend
	if s.forward != nil {
		post = s.forward.PostForward
	}
	size := m.n + s.seal.Room()
	wire.PutTrailer(s.buf(m.buf)[size:], wire.MsgData, m.seq)
	if err := post(m.buf, size+conn.TrailerLen); err != nil {
		return false, s.sendFailed(ctx, err)
	}
	s.posted.Store(m.seq)
	s.seal.Add(m.seq, m.n, m.d)
	if s.forward != nil {
		s.onForward(m.buf) // done with it here; the completion says the same of the wire
	}
	sent := s.sent.Add(int64(m.n))
	s.messages.Add(1)
	s.cfg.Gauges.setBytes(sent)
	if s.cfg.Progress != nil {
		s.cfg.Progress(sent)
	}
	if m.rerr != nil {
		return false, conn.Errorf(conn.KindAborted, "read input", "%v (after %d bytes)", m.rerr, sent)
	}
	return false, nil
}

// credit waits for a credit to send a filled buffer with.
func (s *sender) credit(ctx context.Context) error {
	select {
	case <-s.credits:
	default:
		s.cfg.Gauges.stalled()
		select {
		case <-s.credits:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	s.cfg.Gauges.addInFlight(1)
	return nil
}
