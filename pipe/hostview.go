package pipe

import (
	"cmp"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// HostLag is how far one host of a chain is behind, as the chain reports
// it (see SendConfig.HostsEvery): shown only, never acted on.
type HostLag struct {
	Place   int   // its place in the chain: the receiver Send connects to is 1
	Behind  int64 // bytes its output has yet to take
	Spilled int64 // bytes that went through its spill file so far
}

// chainView is what a sender learns of the hosts down its chain from
// their reports (see wire.MsgReport): a token in asks has the current
// sender ask its receiver for one. Its maker sends the asks (Send on a
// clock, a relay when its own sender asks it); the sender's stream
// goroutine stores the hosts of each report that passed its checks, and
// any goroutine reads them.
type chainView struct {
	asks    chan struct{}
	hosts   atomic.Pointer[[]wire.HostLag]
	refused atomic.Int64 // reports that failed their checks
	gauges  *Gauges      // Send's: it shows the hosts too
	mu      sync.Mutex
	most    []wire.HostLag // by place, the most each host was reported behind and had spilled: under mu
}

func newChainView(g *Gauges) *chainView {
	return &chainView{asks: make(chan struct{}, 1), gauges: g}
}

// ask has the sender ask for a report, unless an ask is already due.
func (v *chainView) ask() {
	select {
	case v.asks <- struct{}{}:
	default:
	}
}

// load returns the hosts of the last report that passed its checks.
func (v *chainView) load() []wire.HostLag {
	if h := v.hosts.Load(); h != nil {
		return *h
	}
	return nil
}

// store keeps the hosts of a report that passed its checks; nil forgets
// what the last one said, after one that failed them.
func (v *chainView) store(hosts []wire.HostLag) {
	v.hosts.Store(&hosts)
	if hosts == nil {
		v.refused.Add(1)
	}
	v.gauges.setHosts(hostLags(hosts), v.refused.Load())
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, h := range hosts {
		i, found := slices.BinarySearchFunc(v.most, h.Place, func(m wire.HostLag, p uint32) int { return int(m.Place) - int(p) })
		if !found {
			v.most = slices.Insert(v.most, i, wire.HostLag{Place: h.Place})
		}
		v.most[i].Behind, v.most[i].Spilled = max(v.most[i].Behind, h.Behind), max(v.most[i].Spilled, h.Spilled)
	}
}

// settle keeps, once the receiver confirmed the whole stream (for itself
// and every host down its chain), the hosts of the last report as no
// longer behind.
func (v *chainView) settle() {
	hosts := slices.Clone(v.load())
	for i := range hosts {
		hosts[i].Behind = 0
	}
	v.hosts.Store(&hosts)
	v.gauges.setHosts(hostLags(hosts), v.refused.Load())
}

// peaks returns, by place, the most each host was reported behind and had
// spilled.
func (v *chainView) peaks() []wire.HostLag {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.most)
}

// hostLags converts the entries of a report for Gauges and Stats.
func hostLags(hosts []wire.HostLag) []HostLag {
	out := make([]HostLag, len(hosts))
	for i, h := range hosts {
		out[i] = HostLag{Place: int(h.Place), Behind: h.Behind, Spilled: h.Spilled}
	}
	return out
}

// askEvery has v ask for a report every interval until ctx ends.
func (v *chainView) askEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			v.ask()
		}
	}
}

// askReports asks the receiver for a report whenever the view wants one
// and the last ask was answered (its control credit is back), until ctx
// ends: so at most one ask in flight, and none faster than the view's
// maker asks. One that cannot be sent fails the stream through fail.
func (s *sender) askReports(ctx context.Context, fail func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.view.asks:
		}
		select {
		case <-ctx.Done():
			return
		case <-s.ctrl:
		}
		n := s.asked.Add(1)
		s.asking.Store(true)
		if err := s.c.SendControl(ctx, wire.AppendTrailer(nil, wire.MsgAskReport, n)); err != nil {
			if ctx.Err() == nil {
				fail(s.sendFailed(ctx, err))
			}
			return
		}
	}
}

// takeReport handles a report from the receiver, which returns the
// control credit of the ask it answers. One that fails its checks is
// dropped, and the view forgets what it knew of the hosts below: it
// never fails the stream, which the view does not steer.
func (s *sender) takeReport(msg []byte) error {
	if s.cfg.view == nil || !s.asking.Swap(false) {
		return conn.Errorf(conn.KindIntegrity, "receive", "the receiver sent a host report that was not asked for")
	}
	// Checked before its credit goes back, which lets the next ask
	// begin: the report answers the ask in flight until then.
	hosts, err := s.checkReport(msg)
	if err != nil {
		hosts = nil
	}
	if err := s.returned(wire.CtrlReturn, conn.KindIntegrity); err != nil {
		return err
	}
	s.cfg.view.store(hosts)
	return nil
}

// checkReport decodes a report and checks it: its MAC under this hop's
// stream key, the ask it answers (the last), and its hosts against the
// chain as this sender knows it (wire.CheckReport).
func (s *sender) checkReport(msg []byte) ([]wire.HostLag, error) {
	ask, hosts, body, mac, err := wire.ParseReport(msg, auth.MACLen)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(mac, s.seal.Report(body)) {
		return nil, errors.New("the report does not carry the stream key's MAC")
	}
	if want := s.asked.Load(); ask != want {
		return nil, fmt.Errorf("the report answers ask %d, not the last, %d", ask, want)
	}
	last := uint32(wire.MaxPlace)
	if s.pos.whole {
		last = s.pos.place + uint32(len(s.pos.down))
	}
	return hosts, wire.CheckReport(hosts, s.pos.place, last)
}

// answerReport answers the sender's ask for a report, whose control
// message is in buf: this receiver's own lag and, as a relay, what its
// next receiver last reported (and it asks that one for the next). The
// report returns the ask's control credit.
func (r *receiver) answerReport(ctx context.Context, buf int, ask uint32) error {
	if !r.seal.Keyed() {
		return conn.Errorf(conn.KindIntegrity, "receive", "the sender asked for a host report on a stream without a key")
	}
	r.repost(buf)
	own := wire.HostLag{Place: r.place}
	if r.lag != nil {
		own.Behind, _, own.Spilled = r.lag.Backlog()
	}
	hosts := []wire.HostLag{own}
	if r.relay != nil {
		hosts = append(hosts, furthestBehind(r.relay.view.load(), wire.MaxReportHosts-1)...)
		r.relay.view.ask()
	}
	body := wire.AppendReport(ask, hosts)
	// If the report cannot be sent the connection broke, and Poll says
	// so after what arrived before.
	_ = r.c.SendControl(ctx, append(body, r.seal.Report(body)...))
	return nil
}

// furthestBehind returns the n hosts of a report that are furthest behind
// (the nearer first among equals), by place: in a chain longer than a
// report holds, the sender sees the hosts that lag most, wherever they
// are.
func furthestBehind(hosts []wire.HostLag, n int) []wire.HostLag {
	if len(hosts) <= n {
		return hosts
	}
	hosts = slices.Clone(hosts)
	slices.SortStableFunc(hosts, func(a, b wire.HostLag) int { return cmp.Compare(b.Behind, a.Behind) })
	hosts = hosts[:n]
	slices.SortFunc(hosts, func(a, b wire.HostLag) int { return cmp.Compare(a.Place, b.Place) })
	return hosts
}
