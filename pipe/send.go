package pipe

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/source"
)

// Send streams r to the receiver at the other end of c and returns when the
// receiver has confirmed that it wrote every byte, or on the first failure.
// On failure it tells the receiver why (unless the receiver is the one that
// gave up) and returns a *conn.Error. Send does not close c.
//
// With SendConfig.Repair, a receiver that fails mid-stream is given up and
// the stream goes on with the first of its Fallback that takes it over
// (Send closes the connections it makes for that): Send then returns nil
// when every receiver not given up confirmed the stream, with those given
// up, here or down the chain, in Stats.Lost. When no receiver is left it
// fails (KindAborted), naming them all.
func Send(ctx context.Context, c conn.Conn, r io.Reader, cfg SendConfig) (Stats, error) {
	o := &origin{s: newSender(c, cfg.stream(), cfg.timeouts(), "receiver"), cfg: cfg, r: r}
	o.s.pos.setDown(cfg.Chain, len(cfg.Chain) > 0, cfg.Fallback)
	if cfg.HostsEvery > 0 && len(cfg.Key) > 0 {
		o.s.cfg.view = newChainView(cfg.Gauges)
		actx, stop := context.WithCancel(ctx)
		var asks sync.WaitGroup
		asks.Go(func() { o.s.cfg.view.askEvery(actx, cfg.HostsEvery) })
		defer asks.Wait()
		defer stop()
	}
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
	if o.s.cfg.view != nil {
		st.Hosts = hostLags(o.s.cfg.view.peaks())
	}
	defer last.release()
	last.failed(err)
	return st, err
}

// origin is a stream's first sender (Send): it reads the input, and
// with SendConfig.Repair streams it through a link. Send's goroutine
// writes and reads it, but for began.
type origin struct {
	s     *sender
	cfg   SendConfig
	r     io.Reader
	began atomic.Bool // the input was opened (Stats.Began): the sender's reader sets it, Send reads it
	link  *link       // with SendConfig.Repair: run sets it, Send reads it after
}

func (o *origin) run(ctx context.Context) (Stats, error) {
	s, cfg := o.s, o.cfg
	if err := cfg.checkRepair(); err != nil {
		return Stats{Info: s.c.Info()}, err
	}
	if _, err := s.handshake(ctx, chainProposal(cfg.Chain, cfg.repairs())); err != nil {
		return Stats{Info: s.c.Info()}, err
	}
	open := func(b source.Buffers) source.Source {
		o.began.Store(true)
		return source.New(o.r, b)
	}
	if !cfg.repairs() {
		return s.stream(ctx, open)
	}
	rc := repairConfig{key: cfg.Key, timeouts: s.timeouts, hops: cfg.Fallback, dial: cfg.Dial}
	if len(rc.hops) == 0 {
		rc.hops = chainHops(cfg.Chain)
	}
	o.link = newLink(rc, s, s.c.Info().Remote, false)
	return o.link.run(ctx, open)
}
