package pipe

import (
	"context"
	"errors"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/source"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// relay sends what a receiver writes on to the next receiver (see
// RelayConfig) with a sender of its own, straight from the receive
// buffers where it can (see adopt), else copied. The receiver re-posts a
// buffer only once the relay is done with it, and confirms its stream
// only once the next receiver has confirmed its own.
type relay struct {
	s        *sender      // towards the next receiver
	name     string       // the next receiver, for messages
	payloads chan payload // from the writer, in order; closed after the last
	// freed has a channel per receive buffer of this receiver's
	// connection, which gets a token once the relay is done with the
	// payload in it: copied; or, forwarded, two: its send completed (sends
	// may complete in any order) and the sender has hashed it.
	freed   []chan struct{}
	done    chan error // the next receiver's stream: nil once confirmed
	started bool
	// link, with RelayConfig.Repair, repairs the stream to the next receiver;
	// s is then its first sender, and the current one is link.s.
	link *link
	src  *relaySource // the input of every stream to a next receiver
}

// payload is what arrived in receive buffer buf of the upstream connection.
type payload struct {
	buf int
	p   []byte
}

// relayAddr returns the address this receiver is to relay to: To, or
// the first receiver of the sender's chain if Allow lets it, or ""
// when there is no chain.
func (r *receiver) relayAddr(ctx context.Context, chain []string) (string, error) {
	switch {
	case r.cfg.Relay.To != "" || len(chain) == 0:
		return r.cfg.Relay.To, nil
	case r.cfg.Relay.Allow == nil:
		return "", conn.Errorf(conn.KindSetup, "", "the sender names receivers to relay to, and this receiver does not relay")
	}
	addr, err := r.cfg.Relay.Allow(ctx, chain[0])
	if err != nil {
		public := "this receiver does not relay to " + shortName(chain[0])
		return "", &relayError{public: public, err: conn.Errorf(conn.KindSetup, "", "%s: %v", public, err)}
	}
	return addr, nil
}

// setUpRelay connects to the next receiver at addr and completes the
// handshake with it (see connectForward), all within one handshake
// timeout, however long the chain: each receiver down it sets up the rest
// within its own. The sender is watched meanwhile: if it goes away, the
// set-up ends.
func (r *receiver) setUpRelay(parent context.Context, addr string, chain []string, flags byte) error {
	ctx, cancel := r.handshakeContext(parent, "the receivers down the chain did not complete the rdmapipe handshake", 1)
	defer cancel()
	wctx, stopWatching := context.WithCancel(ctx)
	var gone error
	var got []conn.Completion
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		cs := make([]conn.Completion, pollBatch)
		for {
			n, err := r.c.Poll(wctx, cs)
			if err != nil {
				if wctx.Err() == nil {
					gone = err
					cancel()
				}
				return
			}
			got = append(got, cs[:n]...)
		}
	}()
	err := r.connectForward(ctx, addr, chain, flags)
	stopWatching()
	<-watched
	r.backlog = append(got, r.backlog...)
	if gone != nil {
		if r.relay != nil {
			r.relay.close()
			r.relay = nil
		}
		return r.senderGone(gone)
	}
	return err
}

// senderGone is the error for a sender whose connection failed while this
// receiver was busy with something else: its abort, if it sent one, else
// the lost connection.
func (r *receiver) senderGone(err error) error {
	for _, c := range r.backlog {
		if c.Op != conn.OpRecv {
			continue
		}
		if body, typ, _, perr := wire.ParseTrailer(r.c.RecvBuf(c.Buf)[:c.Len]); perr == nil && typ == wire.MsgAbort {
			return r.peerAbort(body)
		}
	}
	r.peerGaveUp = true
	return r.lost(err)
}

// connectForward connects to the next receiver at addr with
// RelayConfig.Dial and completes the handshake with it, with this
// receiver's key (RelayConfig.Key for To, if set) and timeouts, passing
// the rest of the chain on, encrypted and repaired (see chainRepair) as
// the sender's flags ask. Without To, addr is where Allow let the first
// of chain be reached.
func (r *receiver) connectForward(ctx context.Context, addr string, chain []string, flags byte) error {
	encrypt, repair := flags&wire.FlagEncrypt != 0, flags&wire.FlagRepair != 0
	rc := r.cfg.Relay
	name, rest := rc.To, chain
	if name == "" {
		name, rest = chain[0], chain[1:]
	}
	name = shortName(name)
	fail := func(err error) error {
		return &relayError{public: "forward to " + name + ": " + setUpFailure(conn.KindOf(err)), err: wrap(conn.KindOf(err), "forward to "+name, err)}
	}
	if rc.Dial == nil {
		return fail(conn.Errorf(conn.KindSetup, "", "this receiver cannot connect to another"))
	}
	c, err := rc.Dial(ctx, addr)
	if err != nil {
		return fail(err)
	}
	key := r.cfg.Key
	if rc.To != "" && rc.Key != nil {
		key = rc.Key
	}
	s := newSender(c, streamConfig{key: key, encrypt: encrypt}, r.timeouts, "next receiver "+name)
	s.pos.id, s.pos.place = r.id, r.place+1
	s.pos.setDown(rest, rc.To == "", rc.Fallback)
	if err := guard(func() error {
		_, err := s.handshake(ctx, chainProposal(rest, repair))
		return err
	}); err != nil {
		s.failed(err)
		s.release()
		c.Close()
		return fail(err)
	}
	r.relay = &relay{s: s, name: name}
	r.relay.src = &relaySource{rl: r.relay}
	r.relay.resize(r.c.RecvBufs())
	switch {
	case rc.To != "" && rc.repairs():
		r.relay.link = newLink(repairConfig{key: r.cfg.Key, timeout: r.cfg.Timeout, hops: rc.Fallback, dial: rc.Dial}, s, rc.To, true)
	case rc.To == "" && repair:
		r.relay.link = newLink(r.chainRepair(rest), s, name, true)
	}
	return nil
}

// chainRepair is the configuration of the repair of a chain the sender
// named and asked to be repaired (rdmasend --to, every receiver with the
// same key): the fallbacks are the receivers after the next one, rest,
// with this receiver's key, and each is reached where Relay allows.
func (r *receiver) chainRepair(rest []string) repairConfig {
	rc := r.cfg.Relay
	dial := func(ctx context.Context, name string) (conn.Conn, error) {
		addr, err := rc.Allow(ctx, name)
		if err != nil {
			return nil, conn.Errorf(conn.KindSetup, "", "this receiver does not relay to %s: %v", shortName(name), err)
		}
		return rc.Dial(ctx, addr)
	}
	return repairConfig{key: r.cfg.Key, timeout: r.cfg.Timeout, hops: chainHops(rest), dial: dial}
}

// resize makes a token channel for each of n receive buffers, for a new
// connection from the sender (the relay is done with every old one).
func (rl *relay) resize(n int) {
	rl.freed = make([]chan struct{}, n)
	for i := range rl.freed {
		rl.freed[i] = make(chan struct{}, 2)
	}
}

// sender returns the sender towards the current next receiver.
func (rl *relay) sender() *sender {
	if rl.link != nil {
		return rl.link.s
	}
	return rl.s
}

// adopt lets the relay send what arrives on up straight from its receive
// buffers, with the trailer rewritten in place, where the connection to
// the next receiver can (conn.Forwarder) and takes chunks as large, and
// the stream is neither encrypted (it is decrypted in place) nor
// repaired. up's window must be open.
func (rl *relay) adopt(up conn.Conn) {
	if rl.s.cfg.encrypt || rl.link != nil {
		return // a repairing relay keeps a copy of what it sends
	}
	if fw, ok := rl.s.c.(conn.Forwarder); ok && rl.s.c.Info().Chunk >= up.Info().Chunk && fw.Adopt(up) == nil {
		rl.s.fwd = &forwarding{Forwarder: fw, from: up, done: rl.free}
	}
}

// setUpFailure says what a failure of kind k to set up the stream to the
// next receiver was, without its details: the next receiver's words are
// not passed up the chain before it has welcomed the relay.
func setUpFailure(k conn.Kind) string {
	switch k {
	case conn.KindAuth:
		return "it does not hold the same key"
	case conn.KindBusy:
		return "it is busy with another stream"
	}
	return "could not connect to it or complete the handshake (the relay's own log says why)"
}

// relayError is a failure to set up the relay to the next receiver. Its
// text, for this receiver's log, says what happened; the sender is told
// only public (see publicReason).
type relayError struct {
	public string
	err    error
}

func (e *relayError) Error() string { return e.err.Error() }

func (e *relayError) Unwrap() error { return e.err }

// publicReason is what the sender is told of err: all of it, but for a
// relay's set-up failure, only its public part.
func publicReason(err error) string {
	var re *relayError
	if errors.As(err, &re) {
		return re.public
	}
	return err.Error()
}

// shortName is a host's address as errors name it: at most 64 bytes, so
// that what failed still fits in an abort message when the address is
// long (up to maxChainHost bytes).
func shortName(addr string) string {
	const most = 64
	if len(addr) <= most {
		return addr
	}
	return addr[:most-3] + "..."
}

// start streams to the next receiver until the writer closes payloads or
// ctx ends; a failure there fails this receiver's stream through fail.
func (rl *relay) start(ctx context.Context, fail func(error)) {
	rl.payloads = make(chan payload, 1)
	rl.done = make(chan error, 1)
	rl.started = true
	open := func(b source.Buffers) source.Source {
		rl.src.b = b
		return rl.src
	}
	go func() {
		err := guard(func() error {
			if rl.link == nil {
				_, err := rl.s.stream(ctx, open)
				return err
			}
			_, err := rl.link.run(ctx, open)
			if errors.Is(err, errNoneLeft) {
				return rl.alone(ctx)
			}
			return err
		})
		rl.sender().failed(err)
		if err != nil && ctx.Err() == nil {
			err = wrap(conn.KindOf(err), "forward to "+rl.name, err)
			fail(err)
		}
		rl.done <- err
	}()
}

// forward hands payload p, which arrived in receive buffer buf, to the
// relay.
func (rl *relay) forward(ctx context.Context, buf int, p []byte) error {
	select {
	case rl.payloads <- payload{buf: buf, p: p}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// free says that the relay is done with receive buffer buf.
func (rl *relay) free(buf int) { rl.freed[buf] <- struct{}{} }

// wait waits until the relay is done with receive buffer buf.
func (rl *relay) wait(ctx context.Context, buf int) error {
	tokens := 1
	if rl.s.fwd != nil {
		tokens = 2
	}
	for range tokens {
		select {
		case <-rl.freed[buf]:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// alone takes what the writer hands over once no receiver is left to
// send it to (see RelayConfig.Repair), until the end of the stream.
func (rl *relay) alone(ctx context.Context) error {
	if rl.src.holding {
		rl.src.holding = false
		rl.free(rl.src.buf)
	}
	for {
		select {
		case p, ok := <-rl.payloads:
			if !ok {
				return nil
			}
			rl.free(p.buf)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// confirmed ends the stream to the next receiver, waits for its
// confirmation and returns how many receivers down the chain it counts,
// and which were lost.
func (rl *relay) confirmed(ctx context.Context) (int, []string, error) {
	close(rl.payloads)
	select {
	case err := <-rl.done:
		rl.done <- err // for close
		if rl.link != nil {
			return rl.link.s.receivers, rl.link.confirmedLost(), err
		}
		return rl.s.receivers, rl.s.lostHosts.names, err
	case <-ctx.Done():
		return 0, nil, context.Cause(ctx)
	}
}

// close waits for the stream to the next receiver to end, then closes
// the connection.
func (rl *relay) close() {
	if rl.started {
		rl.done <- <-rl.done
	}
	s := rl.sender()
	s.release()
	s.c.Close()
}

// relaySource is the input of the sender towards the next receiver: the
// payloads the receiver hands over. Forwarded, it returns the receive
// buffer each arrived in; else it copies them into send buffers (split
// where the next receiver's chunk is smaller).
type relaySource struct {
	rl      *relay
	b       source.Buffers
	rest    []byte // what is left of the payload being copied
	buf     int    // the receive buffer it is in
	holding bool
}

func (rs *relaySource) Next(ctx context.Context) (int, int, bool, error) {
	if !rs.holding {
		select {
		case p, ok := <-rs.rl.payloads:
			if !ok {
				i, err := rs.b.Take(ctx)
				return i, 0, err == nil, err
			}
			if rs.rl.s.fwd != nil {
				return p.buf, len(p.p), false, nil
			}
			rs.rest, rs.buf, rs.holding = p.p, p.buf, true
		case <-ctx.Done():
			return 0, 0, false, context.Cause(ctx)
		}
	}
	i, err := rs.b.Take(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	n := copy(rs.b.Bufs[i][:rs.b.Chunk], rs.rest)
	if rs.rest = rs.rest[n:]; len(rs.rest) == 0 {
		rs.holding = false
		rs.rl.free(rs.buf)
	}
	return i, n, false, nil
}

func (rs *relaySource) Close(int64) {}

func (rs *relaySource) Describe() string { return rs.rl.describe() }

// describe says where the stream goes on, and how (Stats.IO).
func (rl *relay) describe() string {
	if rl.s.fwd != nil {
		return "relay to " + rl.name + ", zero-copy"
	}
	return "relay to " + rl.name + ", one copy"
}
