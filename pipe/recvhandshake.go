package pipe

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// senderAuth is what a sender's auth message (and its chain messages)
// said.
type senderAuth struct {
	flags        byte
	nonce, proof []byte
	id           []byte // the stream's identity
	place        uint32 // this receiver's place in the chain
	chain        []string
}

// handshake sends the hello, checks the sender's auth and proof of the
// key (if any), claims the receiver for this sender and answers with the
// welcome, all within the handshake timeout. rejoin says whether the
// sender must take over the stream this receiver has begun.
func (r *receiver) handshake(parent context.Context, rejoin bool) error {
	ctx, cancel := r.handshakeContext(parent, "the sender did not complete the rdmapipe handshake", 1)
	defer cancel()
	hello, err := r.sendHello(ctx)
	if err != nil {
		return err
	}
	a, err := r.readAuth(ctx, rejoin)
	if err != nil {
		return err
	}
	// The proof covers the whole handshake, the chain included: nothing
	// the sender said is acted on before it is checked.
	var t []byte
	if len(r.cfg.Key) > 0 {
		t = auth.Transcript(r.c.Info(), hello, a.flags, a.nonce, a.id, a.place, a.chain)
		if !auth.ValidProof(r.cfg.Key, auth.SenderProof, t, a.proof) {
			return conn.Errorf(conn.KindAuth, "authenticate", "the sender's key is wrong, or the handshake was altered on the way")
		}
	}
	if err := r.claim(parent, ctx, a, rejoin); err != nil {
		return err
	}
	return r.welcome(ctx, hello[2:], a, t, rejoin)
}

// sendHello sends the hello: whether this receiver holds a key, and a
// nonce.
func (r *receiver) sendHello(ctx context.Context) ([]byte, error) {
	nonce, err := auth.NewNonce()
	if err != nil {
		return nil, conn.Errorf(conn.KindInternal, "authenticate", "random nonce: %v", err)
	}
	hello := []byte{wire.MsgHello, 0}
	if len(r.cfg.Key) > 0 {
		hello[1] = wire.FlagKey
	}
	hello = append(hello, nonce[:]...)
	if err := r.c.SendControl(ctx, hello); err != nil {
		return nil, wrap(conn.KindSetup, "send hello", err)
	}
	return hello, nil
}

// readAuth reads the sender's auth message, checks its flags against
// this receiver's (see checkAuthFlags), and reads the chain it names.
func (r *receiver) readAuth(ctx context.Context, rejoin bool) (senderAuth, error) {
	msg, err := r.handshakeMessage(ctx)
	if err != nil {
		return senderAuth{}, err
	}
	body, typ, _, _ := wire.ParseTrailer(msg)
	if typ != wire.MsgAuth || len(body) < wire.AuthBody {
		return senderAuth{}, conn.Errorf(conn.KindSetup, "handshake", "unexpected message %s from the sender: is it an rdmapipe sender of the same version?", wire.Describe(msg))
	}
	a := senderAuth{
		flags: body[0],
		nonce: body[wire.AuthNonce:wire.AuthID],
		proof: body[wire.AuthMAC:wire.AuthBody],
		id:    body[wire.AuthID:wire.AuthPlace],
		place: binary.LittleEndian.Uint32(body[wire.AuthPlace:]),
	}
	if err := checkAuthFlags(a.flags, len(r.cfg.Key) > 0, r.cfg.Encrypt, rejoin); err != nil {
		return senderAuth{}, err
	}
	if a.flags&wire.FlagChain != 0 {
		if a.chain, err = r.receiveChain(ctx); err != nil {
			return senderAuth{}, err
		}
	}
	return a, nil
}

// checkAuthFlags checks the flags of a sender's auth message against a
// receiver that holds a key or not, accepts only encrypted streams or not,
// and awaits a rejoin or a first sender.
func checkAuthFlags(flags byte, haveKey, encrypt, rejoin bool) error {
	switch {
	case haveKey && flags&wire.FlagKey == 0:
		return conn.Errorf(conn.KindAuth, "authenticate", "the sender presented no key: give it the same key")
	case !haveKey && flags&wire.FlagKey != 0:
		return conn.Errorf(conn.KindAuth, "authenticate", "the sender has a key but this receiver has none")
	case flags&wire.FlagEncrypt != 0 && flags&wire.FlagKey == 0:
		return conn.Errorf(conn.KindSetup, "handshake", "the sender asks for encryption without a key")
	case encrypt && flags&(wire.FlagEncrypt|wire.FlagProbe) == 0:
		return conn.Errorf(conn.KindAuth, "authenticate", "the sender does not encrypt, and this receiver accepts only encrypted streams")
	case !rejoin && flags&wire.FlagRejoin != 0:
		return conn.Errorf(conn.KindSetup, "handshake", "the sender takes over a stream this receiver has not begun")
	case flags&wire.FlagRepair != 0 && flags&wire.FlagKey == 0:
		return conn.Errorf(conn.KindSetup, "handshake", "the sender asks for a chain to be repaired without a key")
	case rejoin && flags&(wire.FlagRejoin|wire.FlagChain|wire.FlagProbe) != wire.FlagRejoin:
		return conn.Errorf(conn.KindSetup, "handshake", "the sender does not take over the stream this receiver has begun: it is taking no other")
	}
	return nil
}

// claim takes the stream and place the authenticated sender claims (see
// takeClaim) and, unless it only probes or rejoins, claims this receiver
// for it (ReceiveConfig.Claim) and sets up the relay to the next receiver, if
// any (parent bounds that, ctx the wait for RelayConfig.Allow).
func (r *receiver) claim(parent, ctx context.Context, a senderAuth, rejoin bool) error {
	if err := r.takeClaim(a.id, a.place, rejoin); err != nil {
		return err
	}
	r.probe = a.flags&wire.FlagProbe != 0
	if rejoin {
		return nil
	}
	r.repaired = a.flags&wire.FlagRepair != 0
	addr, err := r.relayAddr(ctx, a.chain)
	if err != nil {
		return err
	}
	if r.probe {
		return nil
	}
	if r.cfg.Claim != nil && !r.cfg.Claim() {
		return conn.Errorf(conn.KindBusy, "", "the receiver is busy with another stream: retry later")
	}
	if addr == "" {
		return nil
	}
	if err := r.setUpRelay(parent, addr, a.chain, a.flags); err != nil {
		if r.cfg.Unclaim != nil {
			r.cfg.Unclaim()
		}
		return err
	}
	return nil
}

// welcome opens the receive window, sets up the stream's seal and sends
// the welcome under this receiver's key proof; a rejoin's says how many
// bytes were written. nonce is this receiver's from the hello.
func (r *receiver) welcome(ctx context.Context, nonce []byte, a senderAuth, t []byte, rejoin bool) error {
	// Only now, the sender authenticated and the receiver claimed, does
	// the stream's memory get spent.
	var desc []byte
	if w, ok := r.c.(conn.Window); ok && !r.probe {
		var err error
		if desc, err = w.OpenWindow(); err != nil {
			return wrap(conn.KindSetup, "open the receive window", err)
		}
	}
	if r.relay != nil && !rejoin && r.cfg.Rejoin == nil {
		r.relay.adopt(r.c)
	}
	var written []byte
	if rejoin {
		written = binary.LittleEndian.AppendUint64(nil, uint64(r.written.Load()))
	}
	if len(desc) > conn.MaxControl-2-len(written)-auth.MACLen {
		return conn.Errorf(conn.KindInternal, "open the receive window", "a %d-byte description does not fit the welcome", len(desc))
	}
	welcome := make([]byte, 2, 2+len(written)+auth.MACLen+len(desc))
	welcome[0] = wire.MsgWelcome
	welcome = append(append(welcome, written...), make([]byte, auth.MACLen)...)
	if len(r.cfg.Key) > 0 {
		welcome[1] = wire.FlagKey
		copy(welcome[2+len(written):], auth.Proof(r.cfg.Key, auth.ReceiverProof, t, written, desc))
		r.seal = seal.NewKeyed(auth.StreamKey(r.cfg.Key, t), a.flags&wire.FlagEncrypt != 0)
	} else {
		r.seal = seal.New(streamID(nonce, a.nonce))
	}
	welcome = append(welcome, desc...)
	if err := r.c.SendControl(ctx, welcome); err != nil {
		return wrap(conn.KindSetup, "send welcome", err)
	}
	r.authenticated = true
	return nil
}

// handshakeMessage waits for one handshake message from the sender (at least a
// trailer long), copies it out, re-posts its buffer and returns the
// sender's control credit. Heartbeats are skipped (the handshake timeout
// bounds the wait); an abort from the sender ends it.
func (r *receiver) handshakeMessage(ctx context.Context) ([]byte, error) {
	return r.nextRecv(ctx, func(msg []byte) (bool, error) {
		body, typ, _, err := wire.ParseTrailer(msg)
		switch {
		case err != nil:
			return false, wrap(conn.KindSetup, "handshake", fmt.Errorf("%w from the sender: is it an rdmapipe sender of the same version?", err))
		case typ == wire.MsgAbort:
			return false, r.peerAbort(body)
		}
		if err := r.returnControl(ctx); err != nil {
			if ctx.Err() != nil {
				return false, r.cancelled(ctx)
			}
			return false, wrap(conn.KindSetup, "handshake", err)
		}
		return typ != wire.MsgBeat, nil
	})
}
