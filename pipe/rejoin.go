package pipe

import (
	"context"
	"crypto/hmac"
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

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
// refused, and the next one awaited. It applies evRejoin to the stream's
// end when one takes over, else the failure, which it returns. wctx ends
// with ctx, and when a report wakes the loop.
func (r *receiver) takeRejoin(ctx, wctx context.Context, lost error) error {
	d := r.timeouts.handshake + r.timeouts.silence
	hctx, cancel := context.WithTimeout(wctx, d)
	defer cancel()
	r.release()
	if r.rejoined {
		r.c.Close()
	}
	// Until one takes over, the failure is the lost sender's.
	lostSession, lostRejoined := r.session, r.rejoined
	refused := "" // why the last sender that tried was refused
	for {
		c, err := r.cfg.Rejoin(hctx)
		if err != nil || wctx.Err() != nil {
			if err == nil {
				c.Close()
			}
			r.session, r.rejoined = lostSession, lostRejoined
			switch {
			case ctx.Err() != nil:
				r.happen(evCancel, context.Cause(ctx))
			case wctx.Err() != nil:
				r.untilFinal() // the relay failed
			case hctx.Err() != nil:
				r.happen(evNoRejoin, fmt.Errorf("%w; no sender took the stream over within %v%s", lost, d, refused))
			default:
				r.happen(evNoRejoin, fmt.Errorf("%w; no sender can take the stream over: %v%s", lost, err, refused))
			}
			return r.end.err
		}
		r.session = newSession(c, r.timeouts, "sender")
		r.rejoined = true
		err = guard(func() error { return r.handshake(hctx, true) })
		if err == nil {
			if r.relay != nil {
				r.relay.resize(c.RecvBufs())
			}
			r.happen(evRejoin, nil)
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

// untilFinal applies the reports to the stream's end until it is
// decided: a report woke the loop, so one that decides it is there.
func (r *receiver) untilFinal() {
	for !r.end.state.final() {
		rep := <-r.reports
		r.happen(rep.event, rep.err)
	}
}
