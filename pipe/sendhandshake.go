package pipe

import (
	"context"
	"crypto/rand"
	"encoding/binary"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// proposal is what a sender's auth message asks of the receiver.
type proposal struct {
	flags byte     // wire.FlagProbe, FlagRejoin or FlagChain (with FlagRepair), FlagRepair alone (to a chain's last receiver), or 0
	chain []string // the receivers after this one, with FlagChain
}

// chainProposal proposes a stream that the receiver relays down chain, if
// any, repairing it if repair.
func chainProposal(chain []string, repair bool) proposal {
	if len(chain) == 0 {
		return proposal{}
	}
	p := proposal{flags: wire.FlagChain, chain: chain}
	if repair {
		p.flags |= wire.FlagRepair
	}
	return p
}

// handshake waits for the receiver's hello, proposes p under the key (if
// any) and waits for the receiver's welcome, all within the handshake
// timeout. For a rejoin it returns the bytes the receiver has written.
func (s *sender) handshake(parent context.Context, p proposal) (written int64, err error) {
	factor := 1
	if len(p.chain) > 0 {
		factor = 2 // the set-up down the chain is bounded by one timeout
	}
	ctx, cancel := s.handshakeContext(parent, "no rdmapipe handshake from the receiver: is an rdmapipe receiver of the same version listening there?", factor)
	defer cancel()
	hello, err := s.awaitHello(ctx)
	if err != nil {
		return 0, err
	}
	flags, nonce, t, err := s.propose(ctx, hello, p)
	if err != nil {
		return 0, err
	}
	return s.awaitWelcome(ctx, hello, flags, nonce, t)
}

// awaitHello waits for the receiver's hello and checks that both sides
// hold a key, or neither.
func (s *sender) awaitHello(ctx context.Context) ([]byte, error) {
	hello, err := s.controlMessage(ctx, wire.MsgHello, 1+auth.NonceLen)
	if err != nil {
		return nil, err
	}
	haveKey := len(s.cfg.key) > 0
	switch {
	case hello[1]&wire.FlagKey != 0 && !haveKey:
		return nil, conn.Errorf(conn.KindAuth, "authenticate", "the receiver requires a shared key")
	case hello[1]&wire.FlagKey == 0 && haveKey:
		return nil, conn.Errorf(conn.KindAuth, "authenticate", "this sender has a key but the receiver has none: give the receiver the same key")
	}
	return hello, nil
}

// propose sends the auth message, and the chain if p names one: the
// stream's identity, the receiver's place, the flags and a nonce, under
// the key's proof. It returns the flags, the nonce and, with a key, the
// handshake's transcript.
func (s *sender) propose(ctx context.Context, hello []byte, p proposal) (flags byte, nonce [auth.NonceLen]byte, t []byte, err error) {
	nonce, err = auth.NewNonce()
	if err == nil && s.pos.place == 0 {
		s.pos.id, s.pos.place = make([]byte, wire.StreamIDLen), 1
		_, err = rand.Read(s.pos.id)
	}
	if err != nil {
		return 0, nonce, nil, conn.Errorf(conn.KindInternal, "authenticate", "random nonce or stream identity: %v", err)
	}
	if p.chain != nil {
		if err := wire.CheckChain(p.chain); err != nil {
			return 0, nonce, nil, conn.Errorf(conn.KindUsage, "chain of receivers", "%v", err)
		}
	}
	flags = p.flags
	if s.cfg.encrypt {
		if len(s.cfg.key) == 0 {
			return 0, nonce, nil, conn.Errorf(conn.KindUsage, "encrypt", "encryption needs a shared key")
		}
		flags |= wire.FlagEncrypt
	}
	body := make([]byte, wire.AuthBody)
	copy(body[wire.AuthID:], s.pos.id)
	binary.LittleEndian.PutUint32(body[wire.AuthPlace:], s.pos.place)
	copy(body[wire.AuthNonce:], nonce[:])
	if len(s.cfg.key) > 0 {
		flags |= wire.FlagKey
		t = auth.Transcript(s.c.Info(), hello[:2+auth.NonceLen], flags, nonce[:], s.pos.id, s.pos.place, p.chain)
		copy(body[wire.AuthMAC:], auth.Proof(s.cfg.key, auth.SenderProof, t))
	}
	body[0] = flags
	if err := s.handshakeControl(ctx, wire.AppendTrailer(body, wire.MsgAuth, 0)); err != nil {
		return 0, nonce, nil, wrap(conn.KindSetup, "send authentication", err)
	}
	if p.chain != nil {
		if err := s.sendChain(ctx, p.chain); err != nil {
			return 0, nonce, nil, err
		}
	}
	return flags, nonce, t, nil
}

// awaitWelcome waits for the receiver's welcome, checks its key proof,
// sets up the stream's seal and the receiver's window, and returns what a
// rejoin's welcome says the receiver has written.
func (s *sender) awaitWelcome(ctx context.Context, hello []byte, flags byte, nonce [auth.NonceLen]byte, t []byte) (int64, error) {
	var written []byte
	if flags&wire.FlagRejoin != 0 {
		written = make([]byte, wire.WrittenLen)
	}
	welcome, err := s.controlMessage(ctx, wire.MsgWelcome, 1+len(written)+auth.MACLen)
	if err != nil {
		return 0, err
	}
	written = welcome[2 : 2+len(written)]
	proof := welcome[2+len(written) : 2+len(written)+auth.MACLen]
	desc := welcome[2+len(written)+auth.MACLen:]
	if len(s.cfg.key) > 0 {
		if !auth.ValidProof(s.cfg.key, auth.ReceiverProof, t, proof, written, desc) {
			return 0, conn.Errorf(conn.KindAuth, "authenticate", "the receiver's key proof is wrong: it holds a different key, or the handshake was altered on the way")
		}
		s.seal = seal.NewKeyed(auth.StreamKey(s.cfg.key, t), s.cfg.encrypt)
	} else {
		s.seal = seal.New(streamID(hello[2:2+auth.NonceLen], nonce[:]))
	}
	var n int64
	if len(written) > 0 {
		n = int64(binary.LittleEndian.Uint64(written))
	}
	if ws, ok := s.c.(conn.WindowSetter); ok && flags&wire.FlagProbe == 0 {
		if err := ws.SetWindow(desc); err != nil {
			return 0, wrap(conn.KindSetup, "the receiver's window", err)
		}
	}
	s.authenticated = true
	return n, nil
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

// controlMessage waits for a control message of type typ with at least
// size bytes after the type byte, copies it out and re-posts its buffer;
// with typ 0 it waits until a control credit is back instead (and returns
// the credit message). Credits are
// taken as they come; an abort from the receiver ends the wait with the
// receiver's reason.
func (s *sender) controlMessage(ctx context.Context, typ byte, size int) ([]byte, error) {
	return s.nextRecv(ctx, func(msg []byte) (bool, error) {
		switch {
		case len(msg) == 1:
			if err := s.returned(msg[0], conn.KindSetup); err != nil {
				return false, err
			}
			return typ == 0 && len(s.ctrl) > 0, nil
		case len(msg) > 0 && msg[0] == wire.MsgAbort:
			return false, s.peerAbort(msg[1:])
		case len(msg) == 0 || msg[0] != typ || len(msg) < 1+size:
			return false, conn.Errorf(conn.KindSetup, "handshake", "unexpected message %s from the receiver: is it an rdmapipe receiver of the same version?", wire.Describe(msg))
		}
		return true, nil
	})
}
