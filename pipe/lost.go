package pipe

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// lostReport is what a sender learns of the receivers given up down the
// chain: the receiver names them at the end of the stream in lost
// messages, each after the first only once the sender asked for more
// (MsgMoreLost), so that the sender never has more than one to take. The
// confirmation's MAC vouches for all of them. The sender's stream
// goroutine writes it; others read names once the stream is over.
type lostReport struct {
	text  []byte   // what the lost messages said so far; not nil once one came
	more  bool     // the last one said more follow
	asks  int      // requests for more that are due
	names []string // the hosts named, once the confirmation vouched for them
}

// add keeps lost message msg, bounded, until the confirmation's MAC
// vouches for it; ended says whether the stream's end was posted.
func (l *lostReport) add(msg []byte, ended bool) error {
	switch {
	case !ended:
		return conn.Errorf(conn.KindIntegrity, "finish", "the receiver named lost hosts before the end of the stream")
	case l.asks > 0:
		return conn.Errorf(conn.KindIntegrity, "finish", "the receiver named lost hosts without waiting for the sender")
	case !l.more && l.text != nil:
		return conn.Errorf(conn.KindIntegrity, "finish", "the receiver named lost hosts after its last lost message")
	case len(msg) < 2 || len(l.text)+len(msg)-2 > wire.MaxLost:
		return conn.Errorf(conn.KindIntegrity, "finish", "a lost message of %d bytes: empty, or more than %d bytes of lost hosts in all", len(msg), wire.MaxLost)
	}
	if l.text == nil {
		l.text = []byte{}
	}
	l.text = append(l.text, msg[2:]...)
	if l.more = msg[1] != 0; l.more {
		l.asks++
	}
	return nil
}

// askMoreLost asks the receiver for its next lost message, if one is due
// and a control credit is there for it; else a returned credit calls it
// again.
func (s *sender) askMoreLost(ctx context.Context) error {
	if s.lostHosts.asks == 0 {
		return nil
	}
	select {
	case <-s.ctrl:
	default:
		return nil
	}
	s.lostHosts.asks--
	if err := s.c.SendControl(ctx, wire.AppendTrailer(nil, wire.MsgMoreLost, 0)); err != nil {
		return s.lost(err)
	}
	s.spoken()
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

// sendLost names the lost hosts down the chain to the sender, in lost
// messages whose first byte says whether more follow: each but the first
// after the sender asked for it with a more-lost message, so that the sender
// never has more than one to take (see lostReport).
func (r *receiver) sendLost(ctx context.Context, text []byte) error {
	for first := true; len(text) > 0; first = false {
		if !first {
			select {
			case <-r.lostAsks:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		n := min(len(text), wire.LostPiece)
		more := byte(0)
		if n < len(text) {
			more = 1
		}
		if err := r.c.SendControl(ctx, append([]byte{wire.MsgLost, more}, text[:n]...)); err != nil {
			return r.sendFailed(ctx, fmt.Errorf("name the lost hosts: %w", err))
		}
		text = text[n:]
	}
	return nil
}

// lostNames splits the names of lost hosts a confirmation carried.
func lostNames(text []byte) []string {
	if len(text) == 0 {
		return nil
	}
	return strings.Split(string(text), "\n")
}

// lostText joins the names of lost hosts for a confirmation, at most
// wire.MaxLost bytes of them.
func lostText(names []string) []byte {
	text := strings.Join(names, "\n")
	if len(text) > wire.MaxLost {
		text = text[:wire.MaxLost]
	}
	return []byte(text)
}
