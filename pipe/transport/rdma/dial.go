package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// resolveTimeoutMs bounds rdma_cm's address and route resolution.
const resolveTimeoutMs = 2000

// Dialer connects senders to receivers over RDMA. It implements conn.Dialer.
type Dialer struct {
	Options
	// AnswerTimeout, if positive, bounds the wait for the receiver's answer
	// to each connect request, counted from when the request is sent, so
	// that this host's own set-up does not count; past it, Dial fails with
	// ErrNoAnswer.
	AnswerTimeout time.Duration
}

// ErrNoAnswer reports a connect request that got no answer in time: a host
// without an RDMA device, or a network that drops RDMA traffic, sends none.
var ErrNoAnswer = errors.New("no answer to the connect request")

// Dial connects to the receiver listening at addr ("host:port"; a host name
// is tried address by address) and proposes proposal. The returned Conn has
// conn.SenderLayout(proposal) buffers, all receives posted, and its Info
// reports the receiver's answer. Dial fails with kind conn.KindNoRDMA when
// the host has no RDMA device or addr is not reachable through one, with
// conn.KindBusy when the receiver is serving another stream (the caller
// may retry), and with conn.KindSetup for other failures (rejected,
// unreachable, ctx ended); failures of this host's resources (memory,
// locked-memory limit) also satisfy errors.Is(err, conn.ErrLocal).
func (d Dialer) Dial(ctx context.Context, addr string, proposal conn.Params) (conn.Conn, error) {
	op := "connect " + addr
	aps, err := prepare(ctx, op, addr, proposal, false)
	if err != nil {
		return nil, err
	}
	var first error
	for _, ap := range aps {
		dop := op
		if ap.String() != addr {
			dop = fmt.Sprintf("%s (%s)", op, ap)
		}
		c, err := d.dial(ctx, ap, proposal, dop)
		if err == nil {
			return c, nil
		}
		if conn.KindOf(err) != conn.KindNoRDMA {
			return nil, err
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// dial connects to one address and, on iWARP, sends the first message
// (first.go).
func (d Dialer) dial(ctx context.Context, ap netip.AddrPort, proposal conn.Params, op string) (*Conn, error) {
	c, ans, err := d.establish(ctx, ap, proposal, op)
	if err != nil {
		return nil, err
	}
	if (speech{iwarp: C.rp_is_iwarp(c.id) != 0, dialer: true}).greets() {
		if err := c.greet(ctx); err != nil {
			c.free()
			return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: err}
		}
	}
	c.start(ans)
	return c, nil
}

// establish connects to one address and returns the connection, with all
// its lanes established, and the receiver's answer.
func (d Dialer) establish(ctx context.Context, ap netip.AddrPort, proposal conn.Params, op string) (*Conn, conn.Params, error) {
	c, err := d.connect(ctx, ap, proposal, op)
	if err != nil {
		return nil, conn.Params{}, err
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if d.AnswerTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, d.AnswerTimeout)
	}
	ev, err := c.expect(actx, C.RDMA_CM_EVENT_ESTABLISHED, proposal)
	cancel()
	if err != nil {
		c.free()
		kind := conn.KindOf(err)
		if actx.Err() != nil {
			// A host without an RDMA device (or a wire that drops RoCE
			// traffic) sends no answer at all: only actx ends the wait.
			kind, err = conn.KindSetup, fmt.Errorf("%w (%w): the peer may have no RDMA device, or the network drops RDMA traffic", ErrNoAnswer, actx.Err())
		}
		return nil, conn.Params{}, &conn.Error{Kind: kind, Op: op, Err: err}
	}
	var ans conn.Params
	priv := privateData(&ev)
	err = ans.UnmarshalBinary(priv)
	if err == nil && (ans.Version != proposal.Version || ans.Validate() != nil || ans.Chunk > proposal.Chunk || ans.Depth > proposal.Depth) {
		err = fmt.Errorf("receiver answered version %d, chunk %d, depth %d to a proposal of version %d, chunk %d, depth %d",
			ans.Version, ans.Chunk, ans.Depth, proposal.Version, proposal.Chunk, proposal.Depth)
	}
	var offers []netip.Addr
	if err == nil && !d.SendOnly {
		c.ring, offers, err = parseGrant(priv[conn.ParamsLen:], c.lanes.asked)
	}
	if c.ring == nil || !c.ring.split {
		c.split.size = 0
	}
	if err == nil && c.ring != nil && c.ring.lanes > 1 {
		err = d.dialLanes(ctx, c, c.ring.lanes, c.ring.token, proposal, d.destinations(ctx, ap, offers))
	}
	if err != nil {
		c.free()
		return nil, conn.Params{}, &conn.Error{Kind: conn.KindSetup, Op: op, Err: err}
	}
	return c, ans, nil
}

// connect resolves ap, sets up the queue pair and buffers for proposal and
// sends the connect request; the caller waits for the answer.
func (d Dialer) connect(ctx context.Context, ap netip.AddrPort, proposal conn.Params, op string) (*Conn, error) {
	cm, err := newEventChannel()
	if err != nil {
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: local(err)}
	}
	var id *C.struct_rdma_cm_id
	if rc := C.rp_create_id(cm.ch, &id); rc != 0 {
		cm.destroy()
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: local(fmt.Errorf("rdma_create_id: %w", errno(rc)))}
	}
	c := newConn(cm, id, ap.String(), d.Options)
	c.addrPort = ap
	fail := func(k conn.Kind, err error) (*Conn, error) {
		c.free()
		return nil, &conn.Error{Kind: k, Op: op, Err: err}
	}

	dst, err := sockaddr(ap)
	if err != nil {
		return fail(conn.KindSetup, err)
	}
	if rc := C.rp_resolve_addr(id, dst, resolveTimeoutMs); rc != 0 {
		err := errno(rc)
		if noDevice(err) {
			return fail(conn.KindNoRDMA, fmt.Errorf("no RDMA device for this address (rdma_resolve_addr: %w)", err))
		}
		return fail(conn.KindSetup, fmt.Errorf("rdma_resolve_addr: %w", err))
	}
	if _, err := c.expect(ctx, C.RDMA_CM_EVENT_ADDR_RESOLVED, proposal); err != nil {
		return fail(conn.KindOf(err), err)
	}
	if err := checkDevice(id, d.Options, ap.String()); err != nil {
		return fail(conn.KindSetup, err)
	}
	if rc, err := C.rdma_resolve_route(id, resolveTimeoutMs); rc != 0 {
		if noDevice(err) {
			return fail(conn.KindNoRDMA, fmt.Errorf("no RDMA route to this address (rdma_resolve_route: %w)", err))
		}
		return fail(conn.KindSetup, fmt.Errorf("rdma_resolve_route: %w", err))
	}
	if _, err := c.expect(ctx, C.RDMA_CM_EVENT_ROUTE_RESOLVED, proposal); err != nil {
		return fail(conn.KindOf(err), err)
	}
	lanes := 1
	if !d.SendOnly {
		lanes = d.choose(c)
	}
	if err := c.setup(conn.SenderLayout(proposal), 0, false, lanes); err != nil {
		return fail(conn.KindSetup, local(err))
	}

	// The dialer never issues RDMA reads or atomics; one of each keeps
	// iWARP stacks that insist on non-zero values happy.
	var resp, init C.int
	if rc := C.rp_rd_atom(id, &resp, &init); rc != 0 {
		return fail(conn.KindSetup, local(fmt.Errorf("ibv_query_device: %w", errno(rc))))
	}
	priv, _ := proposal.MarshalBinary()
	priv = append(priv, ringRequest(!d.SendOnly, d.manyDevices(), lanes, c.split.size)...)
	if rc := C.rp_connect(id, unsafe.Pointer(&priv[0]), C.int(len(priv)), C.int(min(1, resp, init))); rc != 0 {
		if err := errno(rc); errors.Is(err, syscall.ECONNREFUSED) {
			// iWARP connects a TCP socket here, synchronously.
			return fail(conn.KindSetup, fmt.Errorf("connection refused by peer (nothing listening?): rdma_connect: %w", err))
		}
		return fail(conn.KindSetup, fmt.Errorf("rdma_connect: %w", errno(rc)))
	}
	return c, nil
}

// choose returns how many queue pairs c asks for, and sets the most bytes
// of one of its RDMA WRITEs: Options.QPs and Options.MaxWrite, each where
// set, else what the rate of the port rdma_cm resolved c's id to suggests
// (speed.go); and at least one queue pair per device when it stripes over
// several (see nics.go).
func (d Dialer) choose(c *Conn) int {
	t := portTuning(SysfsRoot, deviceName(c.id), int(c.id.port_num))
	if t.fast() && (d.QPs == 0 || d.MaxWrite == 0) {
		c.split.why = t.String()
	}
	c.split.size = t.write
	if d.MaxWrite > 0 {
		c.split.size = pieceSize(d.MaxWrite)
	}
	c.lanes.asked = d.lanes(t)
	return c.lanes.asked
}

// lanes returns how many queue pairs the dialer asks for, on a port of
// tuning t.
func (d Dialer) lanes(t tuning) int {
	n := d.QPs
	if n == 0 {
		n = t.qps
	}
	if d.manyDevices() {
		n = max(n, d.width())
	}
	return min(max(n, 1), maxLanes)
}

// expect waits for the next CM event of c's id during setup and returns it
// if it has type want, else an *conn.Error (without Op) saying what
// happened instead. proposal explains a rejection.
func (c *Conn) expect(ctx context.Context, want C.int, proposal conn.Params) (event, error) {
	ev, err := c.cm.next(ctx)
	if err != nil {
		return ev, &conn.Error{Kind: conn.KindSetup, Err: err}
	}
	if C.int(ev._type) == want {
		return ev, nil
	}
	kind, err := conn.KindSetup, eventError(&ev, proposal)
	if errors.Is(err, conn.ErrBusy) {
		kind = conn.KindBusy
	}
	if (ev._type == C.RDMA_CM_EVENT_ADDR_ERROR || ev._type == C.RDMA_CM_EVENT_ROUTE_ERROR) && noDevice(statusError(ev.status)) {
		kind = conn.KindNoRDMA
	}
	return ev, &conn.Error{Kind: kind, Err: err}
}

// eventError explains a CM event that ends a connection attempt.
func eventError(ev *event, proposal conn.Params) error {
	status := statusError(ev.status)
	switch ev._type {
	case C.RDMA_CM_EVENT_ADDR_ERROR:
		switch {
		case noDevice(status):
			return fmt.Errorf("no RDMA device for this address (address resolution: %w)", status)
		case errors.Is(status, syscall.ETIMEDOUT):
			return fmt.Errorf("address resolution timed out: host down or not on this RDMA network (%w)", status)
		}
		return fmt.Errorf("address resolution failed: %w", status)
	case C.RDMA_CM_EVENT_ROUTE_ERROR:
		if noDevice(status) {
			return fmt.Errorf("no RDMA route to this address (route resolution: %w)", status)
		}
		return fmt.Errorf("route resolution failed: %w", status)
	case C.RDMA_CM_EVENT_UNREACHABLE:
		return fmt.Errorf("peer unreachable: no answer from its connection manager (%w)", status)
	case C.RDMA_CM_EVENT_REJECTED:
		return rejectError(privateData(ev), proposal)
	case C.RDMA_CM_EVENT_CONNECT_ERROR:
		if errors.Is(status, syscall.ECONNREFUSED) {
			return fmt.Errorf("connection refused by peer (nothing listening?): %w", status)
		}
		return fmt.Errorf("connection error: %w", status)
	case C.RDMA_CM_EVENT_DISCONNECTED:
		return errors.New("peer disconnected during setup")
	case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
		return errors.New("RDMA device removed")
	}
	return fmt.Errorf("unexpected %s (%w)", eventName(ev), status)
}

// statusError turns a CM event status (-errno, or a positive
// transport-specific reason) into an error.
func statusError(status C.int) error {
	if status < 0 {
		return syscall.Errno(-status)
	}
	return fmt.Errorf("status %d", status)
}

// rejectError explains a rejection. An rdmapipe receiver rejects with its
// own Params as private data, with Busy set when it is serving another
// stream (conn.ErrBusy); anything else (a port nobody listens on answers with a
// CM-level reject) has none.
func rejectError(priv []byte, proposal conn.Params) error {
	var theirs conn.Params
	if theirs.UnmarshalBinary(priv) != nil {
		return errors.New("rejected by peer (nothing listening?)")
	}
	if theirs.Version != proposal.Version {
		return fmt.Errorf("rejected by receiver: it speaks protocol version %d, this side proposed version %d: use the same rdmapipe release on both hosts",
			theirs.Version, proposal.Version)
	}
	if theirs.Busy {
		return conn.ErrBusy
	}
	return fmt.Errorf("rejected by receiver (its limits: chunk %d, depth %d): it could not set up the connection, see its log",
		theirs.Chunk, theirs.Depth)
}
