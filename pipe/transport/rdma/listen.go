package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// backlog is the rdma_listen backlog of connect requests.
const backlog = 16

// Listener accepts RDMA connections from senders. It implements
// pipe.Listener.
type Listener struct {
	busy  atomic.Bool // see SetBusy
	cm    *eventChannel
	ids   []*C.struct_rdma_cm_id // listening ids, all on cm
	local pipe.Params
	opt   Options
	addr  string

	// life is held shared by Accept and exclusively by Close's teardown.
	life      sync.RWMutex
	done      context.Context // ended by Close
	stop      context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

// Listen binds an rdma_cm listener to addr ("host:port"; port 0 picks a
// free port) for receivers configured with local. An empty host listens on
// all IPv4 addresses and, where IPv6 works, on all IPv6 addresses, with
// two rdma_cm ids: iWARP devices do not accept IPv4 connections on an IPv6
// wildcard. A host name listens on the first of its addresses that binds.
// ctx bounds host name resolution only. Listen fails with kind
// pipe.KindNoRDMA when the host has no RDMA device or addr belongs to no
// RDMA device.
func Listen(ctx context.Context, addr string, local pipe.Params, opt Options) (*Listener, error) {
	op := "listen " + addr
	aps, err := prepare(ctx, op, addr, local, true)
	if err != nil {
		return nil, err
	}
	cm, err := newEventChannel()
	if err != nil {
		return nil, &pipe.Error{Kind: pipe.KindSetup, Op: op, Err: err}
	}
	l := &Listener{cm: cm, local: local, opt: opt}
	if aps[0].Addr().IsUnspecified() {
		err = l.bind(aps[0], false)
		if err == nil {
			port, _ := netip.ParseAddrPort(l.addr)
			if l.bind(netip.AddrPortFrom(netip.IPv6Unspecified(), port.Port()), true) == nil {
				l.addr = netip.AddrPortFrom(netip.IPv6Unspecified(), port.Port()).String()
			}
		}
	} else {
		for _, ap := range aps {
			if err = l.bind(ap, false); err == nil {
				break
			}
		}
	}
	if err != nil {
		l.free()
		return nil, &pipe.Error{Kind: pipe.KindOf(err), Op: op, Err: err}
	}
	l.done, l.stop = context.WithCancel(context.Background())
	return l, nil
}

// bind adds a listening id for ap, IPv6 only if v6only.
func (l *Listener) bind(ap netip.AddrPort, v6only bool) error {
	var id *C.struct_rdma_cm_id
	if rc := C.rp_create_id(l.cm.ch, &id); rc != 0 {
		return &pipe.Error{Kind: pipe.KindSetup, Err: fmt.Errorf("rdma_create_id: %w", errno(rc))}
	}
	fail := func(k pipe.Kind, err error) error {
		C.rdma_destroy_id(id)
		return &pipe.Error{Kind: k, Err: err}
	}
	sa, err := sockaddr(ap)
	if err != nil {
		return fail(pipe.KindSetup, err)
	}
	if v6only {
		if rc := C.rp_set_afonly(id); rc != 0 {
			return fail(pipe.KindSetup, fmt.Errorf("rdma_set_option(AFONLY): %w", errno(rc)))
		}
	}
	if rc := C.rp_bind_listen(id, sa, backlog); rc != 0 {
		err := errno(rc)
		if noDevice(err) {
			return fail(pipe.KindNoRDMA, fmt.Errorf("address %s belongs to no RDMA device (rdma_bind_addr: %w)", ap, err))
		}
		return fail(pipe.KindSetup, fmt.Errorf("rdma_bind_addr/rdma_listen on %s: %w", ap, err))
	}
	if id.verbs != nil {
		if err := checkDevice(id, l.opt, ap.String()); err != nil {
			return fail(pipe.KindSetup, err)
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
			err = &pipe.Error{Kind: pipe.KindInternal, Op: "close listener " + l.addr, Err: fmt.Errorf("rdma_destroy_id: %w", e)}
		}
	}
	l.cm.destroy()
	return err
}

// SetBusy says whether the receiver is serving a stream; while it is,
// connect requests are refused as busy (see pipe.Listener).
func (l *Listener) SetBusy(busy bool) { l.busy.Store(busy) }

// Addr returns the address the listener is bound to, with the port chosen.
func (l *Listener) Addr() string { return l.addr }

// Accept waits for a connect request, negotiates its proposal against the
// listener's Params and returns the established Conn, sized with
// pipe.ReceiverLayout. A request that cannot be served (bad or
// incompatible proposal, device mismatch, setup failure such as a too low
// locked-memory limit) is rejected with the listener's Params as private
// data, so that the dialer can explain it, and Accept returns the error; the
// Listener stays usable. After Close, Accept returns an error wrapping
// net.ErrClosed.
func (l *Listener) Accept(ctx context.Context) (pipe.Conn, error) {
	l.life.RLock()
	defer l.life.RUnlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.done, cancel)()
	for {
		if l.done.Err() != nil {
			return nil, l.closedError()
		}
		ev, err := l.cm.next(ctx)
		if err != nil {
			if l.done.Err() != nil {
				return nil, l.closedError()
			}
			return nil, &pipe.Error{Kind: pipe.KindSetup, Op: "accept on " + l.addr, Err: err}
		}
		switch ev._type {
		case C.RDMA_CM_EVENT_CONNECT_REQUEST:
			c, err := l.accept(ctx, &ev)
			if err != nil && l.done.Err() != nil {
				return nil, l.closedError()
			}
			return c, err
		case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
			return nil, pipe.Errorf(pipe.KindSetup, "accept on "+l.addr, "RDMA device removed")
		}
	}
}

func (l *Listener) closedError() error {
	return &pipe.Error{Kind: pipe.KindSetup, Op: "accept on " + l.addr, Err: net.ErrClosed}
}

// accept serves one connect request.
func (l *Listener) accept(ctx context.Context, req *event) (pipe.Conn, error) {
	id := req.id
	peer := peerAddr(id)
	op := "accept from " + peer
	c := newConn(nil, id, peer, l.opt)
	reject := func(k pipe.Kind, err error) (pipe.Conn, error) {
		priv, _ := l.local.MarshalBinary()
		C.rp_reject(id, unsafe.Pointer(&priv[0]), C.int(len(priv)))
		c.free()
		return nil, &pipe.Error{Kind: k, Op: op, Err: err}
	}

	var proposal pipe.Params
	if err := proposal.UnmarshalBinary(privateData(req)); err != nil {
		return reject(pipe.KindSetup, err)
	}
	p, err := pipe.Negotiate(l.local, proposal)
	if err != nil {
		return reject(pipe.KindOf(err), err)
	}
	if err := checkDevice(id, l.opt, localAddr(id)); err != nil {
		return reject(pipe.KindSetup, err)
	}
	// Give the connection its own event channel, so that its events do not
	// interleave with the listener's. The request event is already
	// acknowledged, as rdma_migrate_id requires.
	if c.cm, err = newEventChannel(); err != nil {
		return reject(pipe.KindSetup, err)
	}
	if rc, err := C.rdma_migrate_id(id, c.cm.ch); rc != 0 {
		return reject(pipe.KindSetup, fmt.Errorf("rdma_migrate_id: %w", err))
	}
	if err := c.setup(pipe.ReceiverLayout(p)); err != nil {
		return reject(pipe.KindSetup, err)
	}

	// Grant at most what the dialer asked for and the device allows.
	var resp, init C.int
	if rc := C.rp_rd_atom(id, &resp, &init); rc != 0 {
		return reject(pipe.KindSetup, fmt.Errorf("ibv_query_device: %w", errno(rc)))
	}
	resp = min(resp, C.int(req.initiator_depth))
	init = min(init, C.int(req.responder_resources))
	ans, _ := p.MarshalBinary()
	if rc := C.rp_accept(id, unsafe.Pointer(&ans[0]), C.int(len(ans)), resp, init); rc != 0 {
		c.free()
		return nil, &pipe.Error{Kind: pipe.KindSetup, Op: op, Err: fmt.Errorf("rdma_accept: %w", errno(rc))}
	}
	if _, err := c.expect(ctx, C.RDMA_CM_EVENT_ESTABLISHED, proposal); err != nil {
		c.free()
		return nil, &pipe.Error{Kind: pipe.KindSetup, Op: op, Err: err}
	}
	c.start(p)
	return c, nil
}

// Close stops listening and unblocks Accept. Connections already accepted
// stay open.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.stop()
		l.life.Lock()
		defer l.life.Unlock()
		l.closeErr = l.free()
	})
	return l.closeErr
}

var _ pipe.Listener = (*Listener)(nil)
var _ pipe.Dialer = Dialer{}
var _ pipe.Conn = (*Conn)(nil)
