package tcp

import (
	"encoding/binary"
	"net"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// maxBatchBytes is where the writer stops adding queued messages to one
// writev: small messages share a system call, while a large one is reported
// sent as soon as it is written rather than after its successors.
const maxBatchBytes = 64 << 10

// writeLoop writes queued messages in order until the connection fails, or
// until Close, after writing what was queued before it.
func (c *Conn) writeLoop() {
	defer c.life.wg.Done()
	defer close(c.life.written)
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
		case <-c.life.closing:
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
		case <-c.life.done:
			return
		}
	}
}

// batcher is the writer goroutine's gather list: the frames of the
// messages one writev sends.
type batcher struct {
	vec   net.Buffers // headers and payloads, in order
	nb    net.Buffers // what writev consumes; a field so that it does not escape per call
	hdrs  []byte      // the frame headers
	works []work      // the messages in vec
	bytes int         // their payload bytes
}

// newBatcher returns a batcher for up to n messages.
func newBatcher(n int) batcher {
	return batcher{vec: make(net.Buffers, 0, 2*n), hdrs: make([]byte, frameHeaderLen*n), works: make([]work, 0, n)}
}

// reset empties b.
func (b *batcher) reset() { b.vec, b.works, b.bytes = b.vec[:0], b.works[:0], 0 }

// full reports whether b takes no more messages.
func (b *batcher) full() bool { return b.bytes >= maxBatchBytes || len(b.works) == cap(b.works) }

// add appends message w, whose payload is p.
func (b *batcher) add(w work, p []byte) {
	k := len(b.works)
	h := b.hdrs[k*frameHeaderLen : (k+1)*frameHeaderLen]
	frameHeader(h, w.n, w.ctrl)
	b.vec = append(b.vec, h, p)
	b.works = append(b.works, w)
	b.bytes += w.n
}

// writeTo writes the frames to nc.
func (b *batcher) writeTo(nc net.Conn) error {
	b.nb = b.vec
	_, err := b.nb.WriteTo(nc)
	return err
}

// write writes first and whatever else is queued, up to maxBatchBytes, in
// one system call, then reports the sends; what tryWrite left goes first.
// It returns false if the connection failed.
func (c *Conn) write(first work) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	taken := 1
	defer func() { c.queued.Add(int64(-taken)) }()
	if !c.finishRest() {
		return false
	}
	b := &c.batch
	b.reset()
	if !first.resume {
		b.add(first, c.payload(first))
	}
fill:
	for !b.full() {
		select {
		case w := <-c.queue:
			taken++
			if !w.resume {
				b.add(w, c.payload(w))
			}
		default:
			break fill
		}
	}
	if len(b.works) == 0 {
		return true
	}
	if err := b.writeTo(c.nc); err != nil {
		c.failSoon(&conn.Error{Kind: conn.KindAborted, Op: "write to " + c.remote, Err: err})
		return false
	}
	for _, w := range b.works {
		c.complete(w)
	}
	return true
}

// complete reports a written message: a control buffer is free again, a
// send or forward is a completion for Poll. Neither channel is ever full.
func (c *Conn) complete(w work) {
	switch {
	case w.ctrl:
		c.ctrlFree <- w.buf
	case w.fwd:
		c.comps <- conn.Completion{Op: conn.OpForward, Buf: w.buf, Len: w.n}
	default:
		c.comps <- conn.Completion{Op: conn.OpSend, Buf: w.buf, Len: w.n}
	}
}

// pulse sends a pulse (see pulseFrame), after what tryWrite left. It
// returns false if the connection failed.
func (c *Conn) pulse() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.finishRest() {
		return false
	}
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
		return c.bufs.ctrl[w.buf][:w.n]
	case w.fwd:
		return (*c.adopted.Load()).RecvBuf(w.buf)[:w.n]
	}
	return c.bufs.send[w.buf][:w.n]
}
