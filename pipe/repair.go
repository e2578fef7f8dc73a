package pipe

import (
	"context"
	"errors"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/source"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// link is a repairing stream to the next receiver (SendConfig.Repair,
// RelayConfig.Repair): the sender towards the current next receiver, the
// fallbacks left, and the history to resend from. Its goroutine (the one
// that calls run: Send's, or a relay's) writes every field; others read
// them once run has returned, but for hist, which the current sender's
// reader records into.
type link struct {
	cfg  repairConfig
	s    *sender // towards the current next receiver
	name string  // the current next receiver, for Stats.Lost
	// owned says whether s's connection is the link's to close (not the
	// one Send was given).
	owned bool
	hops  []Hop
	hist  *history
	lost  []string
	// id is the stream's identity, place the place in the chain of
	// hops[0], and whole says hops are the rest of the chain (see
	// sender.down).
	id    []byte
	place uint32
	whole bool
}

// errNoneLeft is a repairing link's failure when every receiver it could
// go on with was given up.
var errNoneLeft = errors.New("no receiver left to go on with")

// newLink returns a repairing link that streams with s, whose connection
// it owns if owned, to the receiver called name.
func newLink(cfg repairConfig, s *sender, name string, owned bool) *link {
	hist := &history{ring: make([]byte, historySize(s.c.Info(), len(cfg.hops)))}
	return &link{cfg: cfg, s: s, name: name, owned: owned, hops: cfg.hops, hist: hist, id: s.pos.id, place: s.pos.place + 1, whole: s.pos.whole}
}

// run streams what open returns reads (called once per receiver, with
// the send buffers of its connection) and, while the stream to the next
// receiver fails in a way a receiver further down can repair, gives that
// receiver up and goes on with the next one that takes over. It ends with
// errNoneLeft when none does.
func (l *link) run(ctx context.Context, open func(source.Buffers) source.Source) (Stats, error) {
	for {
		var rs *replaySource
		st, err := l.s.stream(ctx, func(b source.Buffers) source.Source {
			rs = &replaySource{h: l.hist, b: b, pos: l.s.sent.Load(), inner: open(b)}
			return rs
		})
		if err == nil || ctx.Err() != nil || rs.inputFailed || errors.Is(err, ErrStuck) || conn.KindOf(err) != conn.KindAborted {
			return st, err
		}
		sent := l.s.sent.Load()
		l.giveUp(err)
		if err := l.takeOver(ctx, sent); err != nil {
			return st, err
		}
	}
}

// giveUp gives up the current next receiver after its stream failed with
// err: it is told why, if it can still hear it, and named lost.
func (l *link) giveUp(err error) {
	l.s.failed(err)
	l.s.release()
	if l.owned {
		l.s.c.Close()
	}
	l.lost = append(l.lost, shortName(l.name))
}

// takeOver connects to the fallbacks in turn until one completes a
// rejoin handshake and stands within the history, and makes it the next
// receiver, to be resent what it has not written. One that wrote more
// than was sent (sent) is given up too: another sender fed it meanwhile
// (one that gave this link's own upstream up, and took over the receiver
// this link lost), so this link cannot go on with it.
func (l *link) takeOver(ctx context.Context, sent int64) error {
	for len(l.hops) > 0 {
		h, place := l.hops[0], l.place
		l.hops, l.place = l.hops[1:], l.place+1
		s, written, err := l.rejoin(ctx, h, place)
		switch {
		case err == nil && written > sent:
			err = conn.Errorf(conn.KindAborted, "take over at "+shortName(h.Addr), "the receiver says it wrote %d bytes, but only %d were sent: another sender took it over", written, sent)
			s.drop(err)
		case err == nil && written < l.hist.start():
			err = conn.Errorf(conn.KindAborted, "take over at "+shortName(h.Addr), "the receiver wrote %d bytes, and only those from %d on are kept for a resend", written, l.hist.start())
			s.drop(err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			l.lost = append(l.lost, shortName(h.Addr))
			continue
		}
		s.sent.Store(written)
		l.s, l.name, l.owned = s, h.Addr, true
		return nil
	}
	return errNoneLeft
}

// busyPause is the first pause between a taker-over's attempts to connect
// to a fallback that refuses it as busy, each pause twice the last, up to
// maxBusyPause: an attempt sets a whole connection up before the refusal
// (over RDMA, its buffers mapped and registered), so that a short fixed
// pause spins for as long as the fallback still has its upstream.
const (
	busyPause    = 50 * time.Millisecond
	maxBusyPause = time.Second
)

// rejoin connects to hop h, at place place of the chain, and completes a
// rejoin handshake with it within twice the handshake timeout and
// Timeout: h takes it only once it has lost its own upstream, which may
// take that long. It returns the taker-over and the bytes h has written.
func (l *link) rejoin(ctx context.Context, h Hop, place uint32) (*sender, int64, error) {
	name := shortName(h.Addr)
	key := h.Key
	if key == nil {
		key = l.cfg.key
	}
	// No silence timeout until h takes the rejoin: it is silent until
	// then, and the handshake's bound is the only one.
	d := 2 * (l.cfg.timeouts.handshake + l.cfg.timeouts.silence)
	hctx, cancel := context.WithTimeoutCause(ctx, d, conn.Errorf(conn.KindSetup, "take over at "+name, "no rejoin handshake within %v", d))
	defer cancel()
	c, err := l.cfg.dial(hctx, h.Addr)
	for pause := busyPause; conn.KindOf(err) == conn.KindBusy && hctx.Err() == nil; pause = min(2*pause, maxBusyPause) {
		// h has not noticed yet that it lost its upstream: its listener
		// still refuses others as busy.
		select {
		case <-time.After(pause):
		case <-hctx.Done():
		}
		c, err = l.cfg.dial(hctx, h.Addr)
	}
	if err != nil {
		return nil, 0, wrap(conn.KindSetup, "take over at "+name, err)
	}
	s := newSender(c, streamConfig{key: key, encrypt: l.s.cfg.encrypt, view: l.s.cfg.view}, timeouts{handshake: d}, "receiver "+name)
	s.pos = position{id: l.id, place: place, whole: l.whole}
	for _, after := range l.hops {
		s.pos.down = append(s.pos.down, after.Addr)
	}
	var written int64
	if err := guard(func() (err error) {
		written, err = s.handshake(hctx, proposal{flags: wire.FlagRejoin})
		return err
	}); err != nil {
		s.drop(err)
		return nil, 0, wrap(conn.KindOf(err), "take over at "+name, err)
	}
	s.timeouts.silence = l.cfg.timeouts.silence
	return s, written, nil
}

// confirmedLost is what the stream's last sender learned of the hosts
// lost down the chain, after those the link gave up itself.
func (l *link) confirmedLost() []string {
	return append(append([]string(nil), l.lost...), l.s.lostHosts.names...)
}
