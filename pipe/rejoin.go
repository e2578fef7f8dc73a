package pipe

import (
	"context"
	"crypto/hmac"
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// rejoinError is the loss of the sender, which a sender from
// ReceiveConfig.Rejoin may repair.
type rejoinError struct{ error }

func (e rejoinError) Unwrap() error { return e.error }

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

// takeRejoin waits for a sender from ReceiveConfig.Rejoin to take the stream
// over after the sender was lost (lost says how), within one Timeout and
// the handshake timeout: connections that fail the rejoin handshake are
// refused, and the next one awaited.
func (r *receiver) takeRejoin(ctx context.Context, lost error) error {
	d := r.timeouts.handshake + r.timeouts.silence
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
		r.session = newSession(c, r.timeouts, "sender")
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
