package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/admit"
)

// backlog is the rdma_listen backlog of connect requests.
const backlog = 16

// setups returns the policy for the connect requests a Listener sets up
// at once (see admit.Policy): every request carries a valid proposal, and
// a setup has progressed once its peer completed the connection, so that
// no newcomer evicts it. Connect requests that never complete, from one
// host, recycle that host's 4 slots, oldest first; beyond 8 in all, a host
// that already holds one is refused at random, more often as the 16 fill.
// A refused request is answered as busy, before anything is allocated.
func setups() admit.Policy {
	return admit.Policy{PerSource: 4, Start: 8, Full: 16, Rate: 0.3}
}

// penalties returns the policy for sources whose requests fail (a bad
// proposal, a setup they do not complete): from the second failure on,
// they get less time to complete each setup, down to 2 s (a real iWARP
// peer may resend its first message after 1 s, see first.go).
func penalties() admit.PenaltyPolicy {
	return admit.PenaltyPolicy{Step: time.Second, Max: time.Minute, Floor: 2 * time.Second, Sources: 4096}
}

// errDropped ends a setup that the setups policy dropped for a newer one.
var errDropped = errors.New("dropped for a newer connect request: too many connections in set-up")

// establishTimeout bounds how long a Listener waits for a peer to complete
// a connection it accepted (the RTU of IB/RoCE; on iWARP the last step of
// MPA's handshake and the first messages, see first.go): a peer that sends
// a connect request and goes quiet holds one setup slot and its buffers
// this long at most.
const establishTimeout = 5 * time.Second

// Listener accepts RDMA connections from senders. It implements
// conn.Listener.
//
// One goroutine reads the listening ids' connect requests. It refuses bad
// proposals and, while the listener is busy or the setups policy refuses
// them, refuses requests as busy, before anything is allocated; every
// other request is set up in a goroutine of its own, so that a peer that
// never completes its connection holds up no one else. Accept returns the
// established connections and the setup failures.
type Listener struct {
	busy  atomic.Bool // see SetBusy
	cm    *eventChannel
	ids   []*C.struct_rdma_cm_id // listening ids, all on cm
	local conn.Params
	opt   Options
	addr  string
	// wildcard: bound to a wildcard address, so that the lanes of a
	// striped connection may reach it on any device (see nics.go).
	wildcard bool

	// establish is how long a setup waits for ESTABLISHED
	// (establishTimeout; tests lengthen it).
	establish time.Duration

	done      context.Context // ended by Close
	stop      context.CancelFunc
	results   chan accepted // from setups to Accept, unbuffered
	refused   chan error    // refusals of peers, for Accept; dropped when full
	mu        sync.Mutex
	pending   *admit.Table[*setup] // the setups in progress
	penalties *admit.Penalties     // the sources whose requests failed
	loopDone  chan struct{}        // closed when the request loop ends
	loopErr   error                // why the loop ended, unless Close
	wg        sync.WaitGroup       // the request loop and the setups

	// acceptWaits counts the Accepts that began to wait. Tests read it to
	// know that an Accept is blocked.
	acceptWaits atomic.Uint64
	// established counts the setups whose peer completed the connection.
	// Tests read it to know that a setup has progressed.
	established atomic.Uint64

	joinMu sync.Mutex
	joins  map[uint64]chan *event // setups waiting for lanes, by token (lanes.go)

	closeOnce sync.Once
	closeErr  error
}

// accepted is the outcome of one setup: a Conn or an error.
type accepted struct {
	c   *Conn
	err error
}

// Listen binds an rdma_cm listener to addr ("host:port"; port 0 picks a
// free port) for receivers configured with local. An empty host listens on
// all IPv4 addresses and, where IPv6 works, on all IPv6 addresses, with
// two rdma_cm ids: iWARP devices do not accept IPv4 connections on an IPv6
// wildcard. A host name listens on the first of its addresses that binds.
// ctx bounds host name resolution only. Listen fails with kind
// conn.KindNoRDMA when the host has no RDMA device or addr belongs to no
// RDMA device.
func Listen(ctx context.Context, addr string, local conn.Params, opt Options) (*Listener, error) {
	return listen(ctx, addr, local, opt, establishTimeout)
}

// listen is Listen with the bound of the wait for ESTABLISHED.
func listen(ctx context.Context, addr string, local conn.Params, opt Options, establish time.Duration) (*Listener, error) {
	op := "listen " + addr
	aps, err := prepare(ctx, op, addr, local, true)
	if err != nil {
		return nil, err
	}
	cm, err := newEventChannel()
	if err != nil {
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: err}
	}
	l := &Listener{cm: cm, local: local, opt: opt, establish: establish, joins: map[uint64]chan *event{}}
	if aps[0].Addr().IsUnspecified() {
		l.wildcard = true
		err = l.bindAny(aps[0], false)
		if err == nil {
			port, _ := netip.ParseAddrPort(l.addr)
			if l.bind(netip.AddrPortFrom(netip.IPv6Unspecified(), port.Port()), true) == nil {
				l.addr = netip.AddrPortFrom(netip.IPv6Unspecified(), port.Port()).String()
			}
		}
	} else {
		for _, ap := range aps {
			if err = l.bindAny(ap, false); err == nil {
				break
			}
		}
	}
	if err != nil {
		l.free()
		return nil, &conn.Error{Kind: conn.KindOf(err), Op: op, Err: err}
	}
	l.done, l.stop = context.WithCancel(context.Background())
	l.results = make(chan accepted)
	l.refused = make(chan error, backlog)
	l.pending = admit.NewTable[*setup](setups(), rand.Float64)
	l.penalties = admit.NewPenalties(penalties())
	l.loopDone = make(chan struct{})
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// bindAny is bind, tried again, up to anyPortTries times, where ap asks
// for any port and binding or listening on the port that the rdma_cm
// chose itself fails with EADDRINUSE (seen once in the SoftRoCE VM's
// suite, for ":0").
func (l *Listener) bindAny(ap netip.AddrPort, v6only bool) error {
	for try := 1; ; try++ {
		err := l.bind(ap, v6only)
		if ap.Port() != 0 || try == anyPortTries || !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
	}
}

// anyPortTries bounds bindAny's tries.
const anyPortTries = 8

// bind adds a listening id for ap, IPv6 only if v6only.
func (l *Listener) bind(ap netip.AddrPort, v6only bool) error {
	var id *C.struct_rdma_cm_id
	if rc := C.rp_create_id(l.cm.ch, &id); rc != 0 {
		return &conn.Error{Kind: conn.KindSetup, Err: fmt.Errorf("rdma_create_id: %w", errno(rc))}
	}
	fail := func(k conn.Kind, err error) error {
		C.rdma_destroy_id(id)
		return &conn.Error{Kind: k, Err: err}
	}
	sa, err := sockaddr(ap)
	if err != nil {
		return fail(conn.KindSetup, err)
	}
	if v6only {
		if rc := C.rp_set_afonly(id); rc != 0 {
			return fail(conn.KindSetup, fmt.Errorf("rdma_set_option(AFONLY): %w", errno(rc)))
		}
	}
	if rc := C.rp_bind_listen(id, sa, backlog); rc != 0 {
		err := errno(rc)
		if noDevice(err) {
			return fail(conn.KindNoRDMA, fmt.Errorf("address %s belongs to no RDMA device (rdma_bind_addr: %w)", ap, err))
		}
		return fail(conn.KindSetup, fmt.Errorf("rdma_bind_addr/rdma_listen on %s: %w", ap, err))
	}
	if id.verbs != nil {
		if err := checkDevice(id, l.opt, ap.String()); err != nil {
			return fail(conn.KindSetup, err)
		}
	}
	l.ids = append(l.ids, id)
	if l.addr == "" {
		l.addr = localAddr(id)
	}
	return nil
}

// free destroys the listening ids and the event channel.
func (l *Listener) free() error {
	var err error
	for _, id := range l.ids {
		if rc, e := C.rdma_destroy_id(id); rc != 0 && err == nil {
			err = &conn.Error{Kind: conn.KindInternal, Op: "close listener " + l.addr, Err: fmt.Errorf("rdma_destroy_id: %w", e)}
		}
	}
	l.cm.destroy()
	return err
}

// SetBusy says whether the receiver is serving a stream; while it is,
// connect requests are refused as busy (see conn.Listener).
func (l *Listener) SetBusy(busy bool) { l.busy.Store(busy) }

// HoldsTCPPort reports whether the listener holds the TCP port of its
// number as well, as an iWARP listener does (an iWARP connection is a TCP
// connection): bound to an iWARP device, or to a wildcard address on a
// host that has one.
func (l *Listener) HoldsTCPPort() bool {
	for _, id := range l.ids {
		if id.verbs != nil {
			return C.rp_is_iwarp(id) != 0
		}
	}
	devs, _ := Devices()
	for _, d := range devs {
		if d.Transport == "iWARP" {
			return true
		}
	}
	return false
}

// Addr returns the address the listener is bound to, with the port chosen.
func (l *Listener) Addr() string { return l.addr }

// Accept returns the next connection that a sender established, sized
// with conn.ReceiverLayout for the Params negotiated from its proposal.
// Requests that cannot be served are rejected with the listener's Params
// as private data, so that the dialer can explain it, and Accept returns
// the error: bad or incompatible proposals (kind conn.KindSetup), device
// mismatches and peers that do not complete the connection within
// establishTimeout, which match conn.ErrRefused, and failures of this
// host's resources (locked-memory limit, memory, device resources), which
// satisfy errors.Is(err, conn.ErrLocal). Busy refusals (see SetBusy) are
// not reported. The Listener stays usable after an error. After Close, Accept returns an
// error wrapping net.ErrClosed.
func (l *Listener) Accept(ctx context.Context) (conn.Conn, error) {
	if l.done.Err() != nil {
		return nil, l.closedError()
	}
	l.acceptWaits.Add(1)
	select {
	case a := <-l.results:
		if a.err != nil {
			return nil, a.err
		}
		return a.c, nil
	case err := <-l.refused:
		return nil, err
	case <-l.loopDone:
		if l.done.Err() != nil || l.loopErr == nil {
			return nil, l.closedError()
		}
		return nil, l.loopErr
	case <-l.done.Done():
		return nil, l.closedError()
	case <-ctx.Done():
		return nil, &conn.Error{Kind: conn.KindSetup, Op: "accept on " + l.addr, Err: ctx.Err()}
	}
}

func (l *Listener) closedError() error {
	return &conn.Error{Kind: conn.KindSetup, Op: "accept on " + l.addr, Err: net.ErrClosed}
}

// serve reads the listening ids' events until Close or a failure of the
// event channel.
func (l *Listener) serve() {
	defer l.wg.Done()
	defer close(l.loopDone)
	for {
		ev, err := l.cm.next(l.done)
		if err != nil {
			if l.done.Err() == nil {
				l.loopErr = &conn.Error{Kind: conn.KindSetup, Op: "accept on " + l.addr, Err: err}
			}
			return
		}
		switch ev._type {
		case C.RDMA_CM_EVENT_CONNECT_REQUEST:
			l.request(&ev)
		case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
			l.loopErr = conn.Errorf(conn.KindSetup, "accept on "+l.addr, "RDMA device removed")
			return
		}
	}
}

// request decides about one connect request without blocking: it refuses
// a bad proposal, refuses as busy while the listener is busy or every
// setup slot is taken, and otherwise starts the setup.
func (l *Listener) request(req *event) {
	id := req.id
	op := "accept from " + peerAddr(id)
	if j, ok := parseJoin(privateData(req)); ok {
		l.join(req, j)
		return
	}
	source := sourceOf(peerAddr(id))
	var proposal conn.Params
	if err := proposal.UnmarshalBinary(privateData(req)); err != nil {
		l.reject(id, l.local)
		l.fail(source, &conn.Error{Kind: conn.KindSetup, Op: op, Err: err})
		return
	}
	p, err := conn.Negotiate(l.local, proposal)
	if err != nil {
		l.reject(id, l.local)
		l.fail(source, &conn.Error{Kind: conn.KindOf(err), Op: op, Err: err})
		return
	}
	if l.busy.Load() {
		l.reject(id, l.busyParams())
		return
	}
	su := l.admit(source)
	if su == nil {
		l.reject(id, l.busyParams())
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer su.cancel(nil)
		lanes, nics := wantsRing(privateData(req)), wantsNICs(privateData(req))
		if l.opt.QPs > 0 {
			lanes = min(lanes, l.opt.QPs)
		}
		if l.opt.SendOnly || C.rp_is_iwarp(id) != 0 {
			lanes = 0
		}
		c, err := l.setup(su, req, p, proposal, op, lanes, nics)
		if err != nil && !errors.Is(err, conn.ErrLocal) {
			if l.done.Err() == nil {
				l.fail(source, err)
			}
		} else {
			select {
			case l.results <- accepted{c, err}:
			case <-l.done.Done():
				if c != nil {
					c.Close()
				}
			}
		}
		l.leave(su)
	}()
}

// sourceOf names the host of peer (host:port), for the setups and
// penalties policies.
func sourceOf(peer string) string {
	if ap, err := netip.ParseAddrPort(peer); err == nil {
		return ap.Addr().String()
	}
	return peer
}

// setup is one connect request in set-up: its context ends when the
// listener closes or the setups policy drops it; its peer has establish
// to complete the connection.
type setup struct {
	ctx       context.Context
	cancel    context.CancelCauseFunc
	establish time.Duration
}

// admit enters a setup for a connect request from source among those in
// progress, dropping the one the policy drops for it, or returns nil when
// the policy refuses it.
func (l *Listener) admit(source string) *setup {
	su := &setup{}
	su.ctx, su.cancel = context.WithCancelCause(l.done)
	l.mu.Lock()
	defer l.mu.Unlock()
	su.establish, _ = l.penalties.Timeout(source, time.Now(), l.establish)
	victim, drop, ok := l.pending.Arrive(source, su)
	if drop {
		victim.cancel(errDropped)
	}
	if !ok {
		su.cancel(nil)
		return nil
	}
	return su
}

// progressed marks su, whose peer completed the connection, as progressed.
func (l *Listener) progressed(su *setup) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending.Progress(su)
	l.established.Add(1)
}

// leave removes su, whose setup ended, from those in progress.
func (l *Listener) leave(su *setup) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending.Leave(su)
}

// busyParams is the private data of a busy refusal.
func (l *Listener) busyParams() conn.Params {
	return conn.Params{Version: conn.Version, Chunk: l.local.Chunk, Depth: l.local.Depth, Busy: true}
}

// reject refuses a connect request with p as private data and destroys its
// id.
func (l *Listener) reject(id *C.struct_rdma_cm_id, p conn.Params) {
	priv, _ := p.MarshalBinary()
	C.rp_reject(id, unsafe.Pointer(&priv[0]), C.int(len(priv)))
	C.rdma_destroy_id(id)
}

// join hands the connect request of an extra lane to the setup its token
// names, or refuses it.
func (l *Listener) join(req *event, j join) {
	l.joinMu.Lock()
	defer l.joinMu.Unlock()
	select {
	case l.joins[j.Token] <- req:
	default: // no such setup (a nil channel), or it has all its lanes
		C.rp_reject(req.id, nil, 0)
		C.rdma_destroy_id(req.id)
	}
}

// endJoins stops taking joins for token and refuses those a failed setup
// left.
func (l *Listener) endJoins(token uint64, joins chan *event) {
	l.joinMu.Lock()
	defer l.joinMu.Unlock()
	delete(l.joins, token)
	for {
		select {
		case req := <-joins:
			C.rp_reject(req.id, nil, 0)
			C.rdma_destroy_id(req.id)
		default:
			return
		}
	}
}

// fail records a failed request from source, and hands err to Accept
// unless backlog refusals are already waiting for one: a refused peer
// holds no goroutine and no buffer.
func (l *Listener) fail(source string, err error) {
	l.mu.Lock()
	l.penalties.Fail(source, time.Now())
	l.mu.Unlock()
	select {
	case l.refused <- conn.Refused(err):
	default:
	}
}

// setup serves one connect request whose proposal negotiated to p: it
// creates the queue pair and buffers (with lanes > 0, a ring for the
// sender to write into over that many queue pairs, see ring.go and
// lanes.go; with nics, the addresses of this host's other devices for
// them, see nics.go), accepts, and waits for the peer to complete the
// connection and its other lanes, at most su.establish, unless su ends
// first.
func (l *Listener) setup(su *setup, req *event, p, proposal conn.Params, op string, lanes int, nics bool) (*Conn, error) {
	id := req.id
	c := newConn(nil, id, peerAddr(id), l.opt)
	reject := func(err error) (*Conn, error) {
		priv, _ := l.local.MarshalBinary()
		C.rp_reject(id, unsafe.Pointer(&priv[0]), C.int(len(priv)))
		c.free()
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: err}
	}
	if err := checkDevice(id, l.opt, localAddr(id)); err != nil {
		return reject(err)
	}
	// Give the connection its own event channel, so that its events do not
	// interleave with the listener's. The request event is already
	// acknowledged, as rdma_migrate_id requires.
	var err error
	if c.cm, err = newEventChannel(); err != nil {
		return reject(local(err))
	}
	if rc, err := C.rdma_migrate_id(id, c.cm.ch); rc != 0 {
		return reject(local(fmt.Errorf("rdma_migrate_id: %w", err)))
	}
	if err := c.setup(conn.ReceiverLayout(p), p.Credits(), lanes > 0, max(lanes, 1)); err != nil {
		return reject(local(err))
	}
	if lanes > 0 {
		c.split.size = wantsSplit(privateData(req))
	}

	// Grant at most what the dialer asked for and the device allows.
	var resp, init C.int
	if rc := C.rp_rd_atom(id, &resp, &init); rc != 0 {
		return reject(local(fmt.Errorf("ibv_query_device: %w", errno(rc))))
	}
	resp = min(resp, C.int(req.initiator_depth))
	init = min(init, C.int(req.responder_resources))
	ans, _ := p.MarshalBinary()
	var joins chan *event
	if lanes > 0 {
		r := ring{lanes: lanes, split: c.split.size > 0}
		if lanes > 1 {
			if r.token, err = newToken(); err != nil {
				return reject(local(err))
			}
			joins = make(chan *event, lanes-1)
			l.joinMu.Lock()
			l.joins[r.token] = joins
			l.joinMu.Unlock()
			defer l.endJoins(r.token, joins)
		}
		ans = append(ans, r.marshalGrant()...)
		if at, err := netip.ParseAddrPort(localAddr(id)); err == nil && nics && lanes > 1 {
			if offers := l.offers(at.Addr(), deviceName(id)); len(offers) > 0 {
				ans = append(ans, marshalOffers(offers)...)
			}
		}
	}
	if su.ctx.Err() != nil { // dropped or closed before its answer: never accepted
		return reject(context.Cause(su.ctx))
	}
	if rc := C.rp_accept(id, unsafe.Pointer(&ans[0]), C.int(len(ans)), resp, init); rc != 0 {
		c.free()
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: fmt.Errorf("rdma_accept: %w", errno(rc))}
	}
	if err := l.complete(su, c, lanes, joins, proposal, speech{iwarp: C.rp_is_iwarp(id) != 0}.awaits()); err != nil {
		c.free()
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: err}
	}
	l.progressed(su)
	c.start(p)
	return c, nil
}

// complete waits, once c's answer went out, for the peer to complete the
// connection and its other lanes and, if await, to send its first message
// (first.go), all within su.establish, unless su ends first.
func (l *Listener) complete(su *setup, c *Conn, lanes int, joins chan *event, proposal conn.Params, await bool) error {
	ctx, cancel := context.WithTimeout(su.ctx, su.establish)
	defer cancel()
	_, err := c.expect(ctx, C.RDMA_CM_EVENT_ESTABLISHED, proposal)
	if err == nil && lanes > 1 {
		err = l.acceptLanes(ctx, c, lanes, joins, proposal)
	}
	what := "complete the connection"
	if err == nil && await {
		what = "send its first messages"
		err = c.await(ctx)
	}
	switch {
	case err == nil:
	case errors.Is(context.Cause(su.ctx), errDropped):
		err = errDropped
	case errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("peer did not %s within %v", what, su.establish)
	}
	return err
}

// Close stops listening, unblocks Accept, ends the setups in progress and
// frees everything they and the listener allocated. Connections already
// returned by Accept stay open.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.stop()
		l.wg.Wait()
		l.closeErr = l.free()
	})
	return l.closeErr
}

var _ conn.Listener = (*Listener)(nil)
var _ conn.Dialer = Dialer{}
var _ conn.Conn = (*Conn)(nil)
var _ mappedBuffers = (*Conn)(nil)
var _ conn.Window = (*Conn)(nil)
var _ conn.WindowSetter = (*Conn)(nil)
