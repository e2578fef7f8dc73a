package pipe

import (
	"context"
	"errors"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

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
	view := newChainView(nil)
	s := newSender(c, streamConfig{key: key, encrypt: encrypt, view: view}, r.timeouts, "next receiver "+name)
	s.pos.id, s.pos.place = r.id, r.place+1
	s.pos.setDown(rest, rc.To == "", rc.Fallback)
	p := chainProposal(rest, repair)
	if rc.To == "" && repair && len(rest) == 0 {
		p.flags |= wire.FlagRepair // the last receiver: the link below goes on without it
	}
	if err := guard(func() error {
		_, err := s.handshake(ctx, p)
		return err
	}); err != nil {
		s.drop(err)
		return fail(err)
	}
	r.relay = &relay{s: s, name: name, view: view}
	r.relay.src = &relaySource{rl: r.relay}
	r.relay.resize(r.c.RecvBufs())
	switch {
	case rc.To != "" && rc.repairs():
		r.relay.link = newLink(repairConfig{key: r.cfg.Key, timeouts: r.timeouts, hops: rc.Fallback, dial: rc.Dial}, s, rc.To, true)
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
	return repairConfig{key: r.cfg.Key, timeouts: r.timeouts, hops: chainHops(rest), dial: dial}
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
