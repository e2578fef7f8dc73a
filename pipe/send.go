package pipe

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/source"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
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
// up, here or down the chain, in Stats.Lost. When no receiver is left it
// fails (KindAborted), naming them all.
func Send(ctx context.Context, c conn.Conn, r io.Reader, cfg Config) (Stats, error) {
	o := &origin{s: newSender(c, cfg, cfg.timeouts(), "receiver"), r: r}
	o.s.pos.setDown(cfg.Chain, len(cfg.Chain) > 0, cfg.Fallback)
	var st Stats
	err := guard(func() (err error) {
		st, err = o.run(ctx)
		return err
	})
	last := o.s
	if o.link != nil {
		last = o.link.s
		if o.link.owned && !errors.Is(err, ErrStuck) {
			defer last.c.Close()
		}
		st.Lost = o.link.confirmedLost()
		if errors.Is(err, errNoneLeft) {
			err = conn.Errorf(conn.KindAborted, "", "every receiver was lost (%s)", strings.Join(st.Lost, ", "))
		}
	} else {
		st.Lost = o.s.lostHosts.names
	}
	st.Began = o.began.Load()
	defer last.release()
	last.failed(err)
	return st, err
}

// origin is a stream's first sender (Send): it reads the input, and
// with Config.Repair streams it through a link.
type origin struct {
	s     *sender
	r     io.Reader
	began atomic.Bool // the input was opened (Stats.Began)
	link  *link       // with Config.Repair
}

func (o *origin) run(ctx context.Context) (Stats, error) {
	s := o.s
	if err := checkRepair(s.cfg); err != nil {
		return Stats{Info: s.c.Info()}, err
	}
	if _, err := s.handshake(ctx, chainProposal(s.cfg.Chain, s.cfg.Repair || len(s.cfg.Fallback) > 0)); err != nil {
		return Stats{Info: s.c.Info()}, err
	}
	open := func(b source.Buffers) source.Source {
		o.began.Store(true)
		return source.New(o.r, b)
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
	o.link = newLink(cfg, s, s.c.Info().Remote, false)
	return o.link.run(ctx, open)
}

// failed tells the receiver why the sender gave up, unless the receiver is
// the one that did.
func (s *sender) failed(err error) {
	if err != nil && !s.peerGaveUp {
		body := wire.AbortMessage(make([]byte, 0, conn.MaxControl), conn.KindOf(err), err.Error(), conn.TrailerLen)
		lastWords(s.c, wire.AppendTrailer(body, wire.MsgAbort, 0))
	}
}
