// Package ringstate keeps the books of an RDMA receiver's ring (see
// ring.go and lanes.go in package rdma): which of its receive buffers are
// posted, which ring slot the sender must write next, the order in which
// writes and control messages are reported to the engine, and the order in
// which the engine must re-post them.
//
// It is a plain state machine, without cgo and without locking: package
// rdma feeds it what its notification receives report and what the engine
// re-posts, under one lock, and acts on the results: it reports the
// completions, copies a control message into the spare it was given, and
// fails the connection on an error.
//
// The receive buffers are numbered as the engine sees them: 0 to slots-1
// are the ring's slots, slots to slots+spares-1 the spares that hold the
// sender's control messages. The spares start posted; the slots only once
// the receiver opens its window (Open), after the sender authenticated
// itself: until then the ring is not even registered, and a write into it
// breaks the protocol.
package ringstate

import (
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Ring is the state of a receiver's ring. A method that returns an error
// changes nothing.
type Ring struct {
	slots    int
	slotSize int
	striped  bool // writes come over several queue pairs, so out of ring order
	open     bool // the slots are posted (see Open)

	posted     []bool // per buffer: posted and not reported since
	arrived    []int  // per slot: bytes written there and not yet reported, -1 if none
	nextWrite  int    // the slot reported next; with one lane, the one the next write must land in
	nextRepost int    // the slot the engine must re-post next
	spares     []int  // spares posted and holding no message, oldest first
	delivered  uint32 // data messages reported
	held       []held // control messages held back, in arrival order
}

// held is a control message waiting until after data messages are
// reported.
type held struct {
	after uint32
	comp  conn.Completion
}

// New returns the state of a ring of slots slots of slotSize bytes each,
// not yet posted (see Open), followed by spares spares, posted, into which
// the sender writes over lanes queue pairs.
func New(slots, spares, slotSize, lanes int) *Ring {
	r := &Ring{slots: slots, slotSize: slotSize, striped: lanes > 1,
		posted: make([]bool, slots+spares), arrived: make([]int, slots)}
	for i := range r.arrived {
		r.arrived[i] = -1
	}
	for j := slots; j < slots+spares; j++ {
		r.posted[j] = true
		r.spares = append(r.spares, j)
	}
	return r
}

// Open posts the ring's slots: the receiver has registered them and is
// about to tell the sender where they are. Only the first call does
// anything.
func (r *Ring) Open() {
	if r.open {
		return
	}
	r.open = true
	for i := range r.slots {
		r.posted[i] = true
	}
}

// Write accepts the sender's write of n bytes into ring slot: it must be a
// posted slot, not written since, of slotSize bytes at most, and, with a
// single lane, the slot that is due. It appends to out the completions
// that are now due: the writes next in ring order, then the control
// messages they release. An error describes how the sender broke the ring
// protocol.
func (r *Ring) Write(out []conn.Completion, slot, n int) ([]conn.Completion, error) {
	switch {
	case slot < 0 || slot >= r.slots:
		return out, fmt.Errorf("the peer wrote to ring slot %d of %d", slot, r.slots)
	case !r.open:
		return out, fmt.Errorf("the peer wrote to ring slot %d before the receiver opened its window", slot)
	case !r.striped && slot != r.nextWrite:
		return out, fmt.Errorf("the peer wrote ring slot %d where slot %d was due", slot, r.nextWrite)
	case !r.posted[slot] || r.arrived[slot] >= 0:
		return out, fmt.Errorf("the peer wrote ring slot %d before the receiver freed it", slot)
	case n < 0 || n > r.slotSize:
		return out, fmt.Errorf("the peer wrote %d bytes into a %d-byte ring slot", n, r.slotSize)
	}
	r.arrived[slot] = n
	return r.deliver(out), nil
}

// Control accepts a control message of n bytes from the sender, which
// counted says carries after, the number of data messages the sender
// posted before it. It takes the oldest posted spare, which the caller
// copies the message into, and returns it. The message's completion is
// appended to out at once, or, while data it counts or control messages
// before it are still to be reported, held back and appended by the Write
// that releases it. An error means that the sender sent more control
// messages than the receiver had room for.
func (r *Ring) Control(out []conn.Completion, n int, counted bool, after uint32) (spare int, _ []conn.Completion, _ error) {
	if len(r.spares) == 0 {
		return 0, out, fmt.Errorf("the peer sent more control messages than the receiver had room for (this one: %d bytes, immediate %v %d)",
			n, counted, after)
	}
	spare = r.spares[0]
	r.spares = r.spares[1:]
	comp := conn.Completion{Op: conn.OpRecv, Buf: spare, Len: n}
	if !counted {
		after = r.delivered // waits for nothing but the messages before it
	}
	if len(r.held) > 0 || counted && int32(r.delivered-after) < 0 {
		r.held = append(r.held, held{after: after, comp: comp})
		return spare, out, nil
	}
	r.posted[spare] = false
	return spare, append(out, comp), nil
}

// Repost gives receive buffer i back to the ring once the engine is done
// with what was reported in it: a ring slot, which must be the oldest one
// the engine holds, or a spare, which then takes a later control message.
// An error describes the engine's mistake.
func (r *Ring) Repost(i int) error {
	switch {
	case i < 0 || i >= len(r.posted):
		return fmt.Errorf("receive buffer %d out of range", i)
	case r.posted[i]:
		return fmt.Errorf("receive buffer %d is already posted", i)
	case i < r.slots && !r.open:
		return fmt.Errorf("ring slot %d re-posted before the window was opened", i)
	case i >= r.slots:
		r.spares = append(r.spares, i)
	case i != r.nextRepost:
		return fmt.Errorf("ring slot %d re-posted before slot %d, whose data arrived first", i, r.nextRepost)
	default:
		r.nextRepost = (i + 1) % r.slots
	}
	r.posted[i] = true
	return nil
}

// deliver appends the writes that are next in ring order to out, then the
// control messages they release.
func (r *Ring) deliver(out []conn.Completion) []conn.Completion {
	for r.arrived[r.nextWrite] >= 0 {
		slot := r.nextWrite
		r.posted[slot] = false
		out = append(out, conn.Completion{Op: conn.OpRecv, Buf: slot, Len: r.arrived[slot]})
		r.arrived[slot] = -1
		r.nextWrite = (slot + 1) % r.slots
		r.delivered++
	}
	for len(r.held) > 0 && int32(r.delivered-r.held[0].after) >= 0 {
		r.posted[r.held[0].comp.Buf] = false
		out = append(out, r.held[0].comp)
		r.held = r.held[1:]
	}
	return out
}
