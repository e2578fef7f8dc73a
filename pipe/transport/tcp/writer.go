package tcp

import (
	"encoding/binary"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// maxBatchBytes is where the writer stops adding queued messages to one
// writev: small messages share a system call, while a large one is reported
// sent as soon as it is written rather than after its successors.
const maxBatchBytes = 64 << 10

// writeLoop writes queued messages in order until the connection fails, or
// until Close, after writing what was queued before it.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	defer close(c.written)
	for {
		select {
		case w := <-c.queue:
			if !c.write(w) {
				return
			}
		case <-c.pulses:
			if !c.pulse() {
				return
			}
		case <-c.closing:
			for {
				select {
				case w := <-c.queue:
					if !c.write(w) {
						return
					}
				default:
					return
				}
			}
		case <-c.done:
			return
		}
	}
}

// write writes first and whatever else is queued, up to maxBatchBytes, in
// one system call, then reports the sends. It returns false if the
// connection failed.
func (c *Conn) write(first work) bool {
	batch := append(c.batch[:0], first)
	bytes := first.n
fill:
	for bytes < maxBatchBytes && len(batch) < cap(batch) {
		select {
		case w := <-c.queue:
			batch = append(batch, w)
			bytes += w.n
		default:
			break fill
		}
	}
	vec := c.vec[:0]
	for k, w := range batch {
		h := c.hdrs[k*frameHeaderLen : (k+1)*frameHeaderLen]
		frameHeader(h, w.n, w.ctrl)
		vec = append(vec, h, c.payload(w))
	}
	c.nb = vec
	if _, err := c.nb.WriteTo(c.nc); err != nil {
		c.failSoon(&conn.Error{Kind: conn.KindAborted, Op: "write to " + c.remote, Err: err})
		return false
	}
	for _, w := range batch {
		switch {
		case w.ctrl:
			c.ctrlFree <- w.buf
		case w.fwd:
			c.comps <- conn.Completion{Op: conn.OpForward, Buf: w.buf, Len: w.n}
		default:
			c.comps <- conn.Completion{Op: conn.OpSend, Buf: w.buf, Len: w.n}
		}
	}
	return true
}

// pulse sends a pulse (see pulseFrame). It returns false if the
// connection failed.
func (c *Conn) pulse() bool {
	var h [frameHeaderLen]byte
	binary.LittleEndian.PutUint32(h[:], pulseFrame)
	if _, err := c.nc.Write(h[:]); err != nil {
		c.failSoon(&conn.Error{Kind: conn.KindAborted, Op: "write to " + c.remote, Err: err})
		return false
	}
	return true
}

// payload returns the bytes of w.
func (c *Conn) payload(w work) []byte {
	switch {
	case w.ctrl:
		return c.ctrlBufs[w.buf][:w.n]
	case w.fwd:
		return (*c.adopted.Load()).RecvBuf(w.buf)[:w.n]
	}
	return c.sendBufs[w.buf][:w.n]
}
