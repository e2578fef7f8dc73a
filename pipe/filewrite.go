package pipe

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// fileWritesAhead bounds the positional writes a fileSink keeps in flight.
const fileWritesAhead = 4

// fileSink writes to a regular file with up to fileWritesAhead pwrite(2)s
// in flight, straight from the receive buffers, from the file's current
// offset; the file's offset is left after the bytes written, as a
// sequential writer leaves it.
type fileSink struct {
	f     *os.File
	fd    int
	base  int64
	off   int64 // where the next write starts
	max   int
	queue []*outWrite
	wg    sync.WaitGroup
}

// newFileSink returns a fileSink for f, or nil if f is not a regular file
// with an offset, or is in append mode (where Linux's pwrite ignores the
// offset).
func newFileSink(f *os.File, credits int) *fileSink {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil || flags&unix.O_APPEND != 0 {
		return nil
	}
	base, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil
	}
	return &fileSink{f: f, fd: int(f.Fd()), base: base, off: base, max: max(1, min(fileWritesAhead, credits))}
}

func (fs *fileSink) start(buf int, p []byte) {
	w := &outWrite{buf: buf, done: make(chan struct{})}
	fs.queue = append(fs.queue, w)
	off := fs.off
	fs.off += int64(len(p))
	fs.wg.Go(func() {
		defer close(w.done)
		w.n, w.err = pwriteFull(fs.fd, p, off)
		if w.err != nil {
			w.err = fmt.Errorf("write at offset %d: %w", off, w.err)
		}
	})
}

func (fs *fileSink) pending() int      { return len(fs.queue) }
func (fs *fileSink) limit() int        { return fs.max }
func (fs *fileSink) oldest() *outWrite { return fs.queue[0] }
func (fs *fileSink) retire()           { fs.queue = fs.queue[1:] }

func (fs *fileSink) close(written int64) {
	fs.wg.Wait()
	_, _ = fs.f.Seek(fs.base+written, io.SeekStart)
}

func (fs *fileSink) describe() string { return "pwrite" }

// pwriteFull writes all of p at off.
func pwriteFull(fd int, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pwrite(fd, p[n:], off+int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.ErrShortWrite
		}
		n += m
	}
	return n, nil
}
