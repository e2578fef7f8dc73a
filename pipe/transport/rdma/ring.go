package rdma

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// The RDMA WRITE data path. By default a receiver offers the sender a ring:
// its data receive buffers (the first Credits() of its layout), registered
// for remote writes. The sender writes each data message into the next
// slot of the ring with IBV_WR_RDMA_WRITE_WITH_IMM, the slot number as the
// immediate; the receiver learns of it from the completion of one of its
// posted receive work requests, which only carry notifications and the
// sender's control messages (SENDs of at most pipe.MaxControl bytes), in
// small buffers of their own. A control message is copied into the oldest
// posted spare buffer (the rest of the layout, MaxControl bytes each), so
// that the engine sees every message in a buffer it posted.
//
// Both sides walk the ring in order: the engine re-posts data buffers in
// the order their messages arrived (see pipe.Conn), so the slot freed by a
// credit is always the oldest one, which is the one the sender writes next.
// The receiver checks that every write lands in the slot it expects and
// that the engine re-posts in order; either mistake fails the connection.
//
// This is the design of ib_write_bw: payloads land where the receiver will
// read them, page-aligned, and no chunk-sized buffer is spent on control
// messages. iWARP has no immediate data: there, and with Options.SendOnly
// on either side, data travels as SENDs into the posted buffers instead.

// opWrite in the byte after the proposal in the connect request asks for
// a ring.
const opWrite = 1

// ringLen is the encoded size of a ring: flags u8 (opWrite), three zero
// bytes, rkey u32, address u64, stride u32, slots u32, little-endian. It
// follows the answer's pipe.Params in the accept's private data.
const ringLen = 24

// noteSlack is how many notification receives a receiver posts beyond one
// per message the sender may have in flight.
const noteSlack = 2

// ring is a receiver's data ring as the sender sees it.
type ring struct {
	addr   uint64
	rkey   uint32
	stride uint32 // bytes from one slot to the next; a slot holds as much
	slots  uint32
}

// marshal encodes r for the accept's private data.
func (r ring) marshal() []byte {
	b := make([]byte, ringLen)
	b[0] = opWrite
	binary.LittleEndian.PutUint32(b[4:], r.rkey)
	binary.LittleEndian.PutUint64(b[8:], r.addr)
	binary.LittleEndian.PutUint32(b[16:], r.stride)
	binary.LittleEndian.PutUint32(b[20:], r.slots)
	return b
}

// parseRing decodes the ring that follows the Params in an accept's
// private data, if there is one, and checks that it can carry the
// negotiated stream p: a slot per credit, each large enough for a chunk
// and its trailer.
func parseRing(b []byte, p pipe.Params) (*ring, error) {
	if len(b) < ringLen || b[0]&opWrite == 0 {
		return nil, nil
	}
	r := &ring{
		rkey:   binary.LittleEndian.Uint32(b[4:]),
		addr:   binary.LittleEndian.Uint64(b[8:]),
		stride: binary.LittleEndian.Uint32(b[16:]),
		slots:  binary.LittleEndian.Uint32(b[20:]),
	}
	if int(r.slots) != p.Credits() || int(r.stride) < p.Chunk+pipe.TrailerLen {
		return nil, fmt.Errorf("receiver offered a ring of %d slots of %d bytes for %d credits of %d-byte chunks", r.slots, r.stride, p.Credits(), p.Chunk)
	}
	return r, nil
}

// wantsRing reports whether a connect request's private data asks for a
// ring.
func wantsRing(priv []byte) bool {
	return len(priv) > pipe.ParamsLen && priv[pipe.ParamsLen]&opWrite != 0
}

// opName names the data path for pipe.Info.
func opName(write bool) string {
	if write {
		return "write"
	}
	return "send"
}
