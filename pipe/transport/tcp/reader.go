package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"golang.org/x/sys/unix"
)

// readLoop reads messages into posted receive buffers, oldest first, and
// reports each as an OpRecv completion, until the connection fails.
func (c *Conn) readLoop() {
	defer c.wg.Done()
	for {
		if _, err := io.ReadFull(c.br, c.hdr[:]); err != nil {
			c.fail(c.readError(err, "peer closed the connection"))
			return
		}
		n, ctrl, err := frameLen(c.hdr, c.dataSize, c.ctrlSize)
		if err != nil {
			c.fail(&conn.Error{Kind: conn.KindIntegrity, Op: "read from " + c.remote, Err: err})
			return
		}
		posted, kind := c.postedData, "data"
		if ctrl {
			posted, kind = c.postedCtrl, "control"
		}
		var i int
		select {
		case i = <-posted:
		default:
			c.fail(&conn.Error{Kind: conn.KindIntegrity, Op: "read from " + c.remote,
				Err: fmt.Errorf("the peer sent a %d-byte %s message with no receive buffer posted for it: it does not keep to the protocol's credits", n, kind)})
			return
		}
		if _, err := io.ReadFull(c.br, c.recvBufs[i][:n]); err != nil {
			c.fail(c.readError(err, "peer closed the connection in the middle of a message"))
			return
		}
		c.comps <- conn.Completion{Op: conn.OpRecv, Buf: i, Len: n}
	}
}

// ctrlFrame is the bit of a frame header that marks a control message.
const ctrlFrame = 1 << 31

// frameHeader encodes the header of a message of n bytes: its length,
// with ctrlFrame set for a control message.
func frameHeader(h []byte, n int, ctrl bool) {
	v := uint32(n)
	if ctrl {
		v |= ctrlFrame
	}
	binary.LittleEndian.PutUint32(h, v)
}

// frameLen decodes a frame header and checks the length against the
// capacity of the receive buffers for its kind: dataSize bytes for a data
// message, ctrlSize for a control message. The comparison is made before
// any conversion to int, so that no length can turn negative or index past
// a buffer.
func frameLen(hdr [frameHeaderLen]byte, dataSize, ctrlSize int) (int, bool, error) {
	v := binary.LittleEndian.Uint32(hdr[:])
	ctrl := v&ctrlFrame != 0
	n, size, kind := v&^ctrlFrame, dataSize, "data"
	if ctrl {
		size, kind = ctrlSize, "control"
	}
	if uint64(n) > uint64(size) {
		return 0, false, fmt.Errorf("peer sent a %d-byte %s message but its receive buffers hold %d bytes: the peer does not keep to the negotiated chunk size", n, kind, size)
	}
	return int(n), ctrl, nil
}

// readError describes a failed read; eof says what an end of file means.
func (c *Conn) readError(err error, eof string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errors.New(eof)
	}
	return &conn.Error{Kind: conn.KindAborted, Op: "read from " + c.remote, Err: err}
}

// countingReader counts the bytes read through it into n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (cr countingReader) Read(p []byte) (int, error) {
	k, err := cr.r.Read(p)
	cr.n.Add(int64(k))
	return k, err
}

// Progress returns a count that grows while bytes move between the peers:
// the bytes that arrived from the peer, counting those of a message still
// arriving, and the bytes of ours the peer's host acknowledged, which grow
// only while the peer reads once its receive buffer is full. On a slow
// link one large message can take longer than the engine's idle timeout
// in either direction (see conn.ProgressCounter).
func (c *Conn) Progress() int64 { return c.arrived.Load() + c.acked() }

// acked returns how many bytes of ours the peer's host acknowledged
// (TCP_INFO), or 0 where the kernel cannot tell.
func (c *Conn) acked() int64 {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var n uint64
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n = info.Bytes_acked
		}
	})
	return int64(n)
}
