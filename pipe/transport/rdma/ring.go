package rdma

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma/ringstate"
)

// The RDMA WRITE data path. By default a receiver offers the sender a ring:
// its data receive buffers (the first Credits() of its layout), registered
// for remote writes. The sender writes each data message into the next
// slot of the ring with IBV_WR_RDMA_WRITE_WITH_IMM, the slot number as the
// immediate; the receiver learns of it from the completion of one of its
// posted receive work requests, which only carry notifications and the
// sender's control messages (SENDs of at most conn.MaxControl bytes), in
// small buffers of their own. A control message is copied into the oldest
// posted spare buffer (the rest of the layout, MaxControl bytes each), so
// that the engine sees every message in a buffer it posted.
//
// The ring is the only memory a peer can write, and only once it has
// earned it: the accept grants a ring (and the lanes, see lanes.go) but
// says nothing of where it is; the receiver maps and registers it when the
// engine opens its window, after the sender authenticated itself and
// claimed the receiver, and its address and key travel in the engine's
// welcome, under the key's proof when there is one (see OpenWindow and
// SetWindow). Everything else is registered for local access only.
//
// Both sides walk the ring in order: the engine re-posts data buffers in
// the order their messages arrived (see conn.Conn), so the slot freed by a
// credit is always the oldest one, which is the one the sender writes next.
// The receiver checks that every write lands in the slot it expects and
// that the engine re-posts in order; either mistake fails the connection.
//
// This is the design of ib_write_bw: payloads land where the receiver will
// read them, page-aligned, and no chunk-sized buffer is spent on control
// messages. iWARP has no immediate data: there, and with Options.SendOnly
// on either side, data travels as SENDs into the posted buffers instead.

// opWrite in the byte after the proposal in the connect request asks for
// a ring (opNICs beside it asks for addresses on other devices, see
// nics.go); the next byte asks for lanes (see lanes.go), and the one after
// it, if not 0, says that data messages come as several RDMA WRITEs of
// 1<<b bytes (see splitRequest). opSplit in a grant accepts that.
const (
	opWrite = 1
	opSplit = 4
)

// Split data messages: the sender writes a message of n bytes as
// ceil(n/piece) RDMA WRITEs into its slot, the last one with the
// immediate, which then holds the slot in its low 16 bits and the number
// of pieces before the last in its high 16; the receiver's completion
// says how many bytes the last one carried. With a piece of 4096 bytes
// or more, 16 bits count the pieces of the largest chunk.
const (
	minPieceShift = 12
	maxPieceShift = 30
	pieceSlotBits = 16
)

// pieceSize rounds n down to a power of two from 1<<minPieceShift.
func pieceSize(n int) int {
	s := minPieceShift
	for s < maxPieceShift && 1<<(s+1) <= n {
		s++
	}
	return 1 << s
}

// splitImm returns the immediate of the last WRITE of an n-byte message
// into slot, split into pieces of piece bytes.
func splitImm(slot uint32, n, piece int) uint32 {
	return slot | uint32(max(n-1, 0)/piece)<<pieceSlotBits
}

// splitLen returns the slot and the length of a message from the
// immediate and the byte count of its last WRITE.
func splitLen(imm uint32, last, piece int) (slot, n int) {
	return int(imm & (1<<pieceSlotBits - 1)), int(imm>>pieceSlotBits)*piece + last
}

// noteSlack is how many notification receives a receiver posts beyond one
// per message the sender may have in flight.
const noteSlack = 2

// grantLen is the encoded size of a ring's grant: flags u8 (opWrite),
// lanes u8, two zero bytes, token u64, little-endian. It follows the
// answer's conn.Params in the accept's private data, and the listener's
// addresses on its other devices may follow it (see marshalOffers). Lanes
// and token are for striping (see lanes.go).
const grantLen = 12

// ringLen is the encoded size of a ring's place, the description
// OpenWindow returns for the welcome: rkey u32, address u64, stride u32,
// slots u32, little-endian. A ring registered on several devices (see
// nics.go) adds the rkey of each lane, u32 each.
const ringLen = 20

// ring is a receiver's data ring as the sender sees it, and the lanes it
// granted. Until SetWindow, only lanes and token are known.
type ring struct {
	split  bool // the receiver takes data messages split into several WRITEs
	addr   uint64
	rkey   uint32
	rkeys  []uint32 // the key of each lane (all rkey on one device)
	stride uint32   // bytes from one slot to the next; a slot holds as much
	slots  uint32
	lanes  int    // queue pairs, 1 or more
	token  uint64 // names the connection in the joins of lanes 1 and up
}

// recvRing is a receiver's ring, if it offers one: bufs.recv[:slots] are
// the ring, bufs.recv[slots:] the spares, and rs keeps their books; notes
// are the buffers of the posted receive work requests, notesPerLane for
// each queue pair.
type recvRing struct {
	slots        int
	notes        [][]byte
	notesPerLane int
	mu           sync.Mutex
	rs           *ringstate.Ring // under mu
}

// open opens the ring's books to data messages, once the window is open.
func (r *recvRing) open() {
	r.mu.Lock()
	r.rs.Open()
	r.mu.Unlock()
}

// repost puts ring slot or spare i back in the books, which refuse one
// that is not the peer's to fill again.
func (r *recvRing) repost(i int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rs.Repost(i)
}

// marshalGrant encodes r's lanes and token for the accept's private data.
func (r ring) marshalGrant() []byte {
	b := make([]byte, grantLen)
	b[0], b[1] = opWrite, byte(r.lanes)
	if r.split {
		b[0] |= opSplit
	}
	binary.LittleEndian.PutUint64(b[4:], r.token)
	return b
}

// parseGrant decodes the grant of a ring that follows the Params in an
// accept's private data, if there is one, and the addresses the listener
// offers on its other devices after it, and checks that it grants 1 to
// asked lanes.
func parseGrant(b []byte, asked int) (*ring, []netip.Addr, error) {
	if len(b) < grantLen || b[0]&opWrite == 0 {
		return nil, nil, nil
	}
	r := &ring{lanes: int(b[1]), token: binary.LittleEndian.Uint64(b[4:]), split: b[0]&opSplit != 0}
	if r.lanes < 1 || r.lanes > max(asked, 1) {
		return nil, nil, fmt.Errorf("receiver granted %d queue pairs where %d were asked for", r.lanes, asked)
	}
	offers, err := parseOffers(b[grantLen:])
	if err != nil {
		return nil, nil, err
	}
	return r, offers, nil
}

// marshal encodes where r is, for the welcome, with the key of each lane
// if they differ.
func (r ring) marshal() []byte {
	b := make([]byte, ringLen, ringLen+4*len(r.rkeys))
	binary.LittleEndian.PutUint32(b, r.rkey)
	binary.LittleEndian.PutUint64(b[4:], r.addr)
	binary.LittleEndian.PutUint32(b[12:], r.stride)
	binary.LittleEndian.PutUint32(b[16:], r.slots)
	if slices.ContainsFunc(r.rkeys, func(k uint32) bool { return k != r.rkey }) {
		for _, k := range r.rkeys {
			b = binary.LittleEndian.AppendUint32(b, k)
		}
	}
	return b
}

// parseRing decodes where a receiver's ring is and checks that it can
// carry the negotiated stream p over lanes queue pairs: a slot per
// credit, each large enough for a chunk and its trailer, and a key for
// each lane.
func parseRing(b []byte, p conn.Params, lanes int) (ring, error) {
	if len(b) != ringLen && len(b) != ringLen+4*lanes {
		return ring{}, fmt.Errorf("receiver described its ring in %d bytes, not %d (or %d for %d lanes on several devices)", len(b), ringLen, ringLen+4*lanes, lanes)
	}
	r := ring{
		rkey:   binary.LittleEndian.Uint32(b),
		addr:   binary.LittleEndian.Uint64(b[4:]),
		stride: binary.LittleEndian.Uint32(b[12:]),
		slots:  binary.LittleEndian.Uint32(b[16:]),
		rkeys:  make([]uint32, lanes),
	}
	for k := range r.rkeys {
		r.rkeys[k] = r.rkey
		if len(b) > ringLen {
			r.rkeys[k] = binary.LittleEndian.Uint32(b[ringLen+4*k:])
		}
	}
	if int(r.slots) != p.Credits() || int(r.stride) < p.Chunk+conn.TagLen+conn.TrailerLen {
		return ring{}, fmt.Errorf("receiver offered a ring of %d slots of %d bytes for %d credits of %d-byte chunks", r.slots, r.stride, p.Credits(), p.Chunk)
	}
	return r, nil
}

// offer returns where the ring of this receiver is, once its window is
// open.
func (c *Conn) offer() ring {
	stride := len(c.bufs.recv[0])
	if c.recvRing.slots > 1 {
		stride = int(uintptr(unsafe.Pointer(&c.bufs.recv[1][0])) - uintptr(unsafe.Pointer(&c.bufs.recv[0][0])))
	}
	r := ring{addr: uint64(uintptr(unsafe.Pointer(&c.bufs.recv[0][0]))), rkey: uint32(c.win.mr.rkey),
		stride: uint32(stride), slots: uint32(c.recvRing.slots), rkeys: make([]uint32, len(c.lanes.qps))}
	for lane, k := range c.devs.laneNIC {
		r.rkeys[lane] = r.rkey
		if k > 0 {
			r.rkeys[lane] = uint32(c.devs.nics[k-1].winMR.rkey)
		}
	}
	return r
}

// SetWindow tells a sender's connection that the receiver's window is
// open, and places its writes in the ring whose place the receiver's
// OpenWindow described (desc, from the welcome); without a ring granted in
// the accept, desc must be empty. Data messages are refused until then. It
// must be called from the goroutine that posts them, or before it starts.
func (c *Conn) SetWindow(desc []byte) error {
	if c.ring == nil {
		if len(desc) > 0 {
			return fmt.Errorf("receiver %s described a ring (%d bytes) it did not grant", c.peer, len(desc))
		}
		c.placed = true
		return nil
	}
	r, err := parseRing(desc, c.params, c.ring.lanes)
	if err != nil {
		return fmt.Errorf("%s: %w", c.peer, err)
	}
	r.lanes, r.token, r.split = c.ring.lanes, c.ring.token, c.ring.split
	c.ring, c.placed = &r, true
	return nil
}

// ringRequest is what a connect request asks for beyond its Params: a ring
// (opWrite), with nics the addresses of the listener's other devices
// (opNICs), how many lanes, and, with split > 0, to split data messages
// into WRITEs of split bytes (a power of two), in the bytes after the
// Params.
func ringRequest(write, nics bool, lanes, split int) []byte {
	if !write {
		return nil
	}
	op := byte(opWrite)
	if nics {
		op |= opNICs
	}
	b := []byte{op, byte(min(max(lanes, 1), maxLanes))}
	if split > 0 {
		shift := minPieceShift
		for 1<<shift < split {
			shift++
		}
		b = append(b, byte(shift))
	}
	return b
}

// wantsSplit returns the size of the pieces a connect request's private
// data says its data messages come in, 0 if they are not split.
func wantsSplit(priv []byte) int {
	if wantsRing(priv) == 0 || len(priv) <= conn.ParamsLen+2 {
		return 0
	}
	if s := int(priv[conn.ParamsLen+2]); s >= minPieceShift && s <= maxPieceShift {
		return 1 << s
	}
	return 0
}

// wantsNICs reports whether a connect request's private data asks for the
// addresses of the listener's other devices.
func wantsNICs(priv []byte) bool {
	return len(priv) > conn.ParamsLen && priv[conn.ParamsLen]&(opWrite|opNICs) == opWrite|opNICs
}

// wantsRing returns how many lanes a connect request's private data asks
// for with a ring, 0 if it asks for none.
func wantsRing(priv []byte) int {
	if len(priv) <= conn.ParamsLen || priv[conn.ParamsLen]&opWrite == 0 {
		return 0
	}
	if len(priv) <= conn.ParamsLen+1 {
		return 1
	}
	return min(max(int(priv[conn.ParamsLen+1]), 1), maxLanes)
}

// opName names the data path for conn.Info.
func opName(write bool) string {
	if write {
		return "write"
	}
	return "send"
}
