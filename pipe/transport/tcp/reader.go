package tcp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// reader is the reader goroutine's state.
type reader struct {
	br      *bufio.Reader
	arrived atomic.Int64         // bytes read from the socket, see Progress
	hdr     [frameHeaderLen]byte // the frame header
	pulsed  time.Time            // when the reader last asked for a pulse
	pulses  chan<- struct{}      // where it asks the writer for one
}

// readLoop reads messages into posted receive buffers, oldest first, and
// reports each as an OpRecv completion, until the connection fails.
func (c *Conn) readLoop() {
	defer c.life.wg.Done()
	for {
		if _, err := io.ReadFull(c.in.br, c.in.hdr[:]); err != nil {
			c.fail(c.readError(err, "peer closed the connection"))
			return
		}
		if binary.LittleEndian.Uint32(c.in.hdr[:]) == pulseFrame {
			continue // counted as arrived: see Progress
		}
		n, ctrl, err := frameLen(c.in.hdr, c.bufs.dataSize, c.bufs.ctrlSize)
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
		if err := c.in.readBody(c.bufs.recv[i][:n]); err != nil {
			c.fail(c.readError(err, "peer closed the connection in the middle of a message"))
			return
		}
		c.comps <- conn.Completion{Op: conn.OpRecv, Buf: i, Len: n}
	}
}

// pulseStep is how much of a message the reader reads between checks of
// whether a pulse is due.
const pulseStep = 256 << 10

// pulseInterval is the least time between two pulses (see the package
// documentation).
const pulseInterval = 200 * time.Millisecond

// readBody reads a message's body into p, asking the writer for a pulse
// whenever pulseInterval has passed since the last one while it arrives.
func (r *reader) readBody(p []byte) error {
	for len(p) > 0 {
		k, err := io.ReadFull(r.br, p[:min(len(p), pulseStep)])
		if err != nil {
			return err
		}
		if p = p[k:]; len(p) > 0 && time.Since(r.pulsed) >= pulseInterval {
			r.pulsed = time.Now()
			select {
			case r.pulses <- struct{}{}:
			default: // one is due already
			}
		}
	}
	return nil
}

// ctrlFrame is the bit of a frame header that marks a control message.
const ctrlFrame = 1 << 31

// pulseFrame is the whole header of a pulse, which has no body: a length
// no message can have (see the package documentation).
const pulseFrame = 1 << 30

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

// rawReader reads a socket with raw read(2) calls on its non-blocking
// descriptor, waiting in the network poller only when nothing is there.
// A read that finds data keeps its P: the runtime neither hands the P to
// another thread meanwhile nor wakes its system monitor, which otherwise
// checks every 20 us for a while after each such read.
type rawReader struct {
	nc   net.Conn
	raw  syscall.RawConn
	p    []byte
	n    int
	err  error
	read func(fd uintptr) bool // r.readFd, made once
}

func newRawReader(nc net.Conn, raw syscall.RawConn) *rawReader {
	r := &rawReader{nc: nc, raw: raw}
	r.read = r.readFd
	return r
}

// Read reads into p what the socket holds, at most len(p) bytes, waiting
// for some if it holds none; errors are worded as net.Conn's Read words
// them.
func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.err = p, 0, nil
	err := r.raw.Read(r.read)
	r.p = nil
	if err == nil {
		err = r.err
	}
	if err != nil && err != io.EOF {
		if errors.Is(err, net.ErrClosed) {
			err = net.ErrClosed
		}
		err = &net.OpError{Op: "read", Net: "tcp", Source: r.nc.LocalAddr(), Addr: r.nc.RemoteAddr(), Err: err}
	}
	return r.n, err
}

// readFd is one read(2) of fd into r.p; it reports false when the socket
// has nothing yet, for the poller to wait.
func (r *rawReader) readFd(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return false
		case e != 0:
			r.err = os.NewSyscallError("read", e)
		case n == 0:
			r.err = io.EOF
		default:
			r.n = int(n)
		}
		return true
	}
}

// Progress returns how many bytes have arrived from the peer so far,
// counting those of a message still arriving and the peer's pulses, which
// say that it reads ours: on a slow link one large message can take longer
// than the engine's idle timeout in either direction (see
// conn.ProgressCounter).
func (c *Conn) Progress() int64 { return c.in.arrived.Load() }
