package sink

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// fileWritesAhead bounds the writes a fileSink queues.
const fileWritesAhead = 4

// fileSink writes to a regular file with pwrite(2), straight from the
// receive buffers, from the file's current offset, on a goroutine of its
// own: the writer checksums the next payloads while earlier ones are
// written. The writes run one at a time, in stream order, so that a
// receiver killed mid-stream leaves a prefix of the stream in the file,
// never a hole. The file's offset is left after the bytes written, as a
// sequential writer leaves it.
type fileSink struct {
	f     *os.File
	fd    int
	base  int64
	off   int64 // where the next write starts
	max   int
	queue []*Write // started, not retired
	jobs  chan fileJob
	done  chan struct{} // closed when the write goroutine has ended
}

// fileJob is one payload for the write goroutine.
type fileJob struct {
	w   *Write
	p   []byte
	off int64
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
	fs := &fileSink{f: f, fd: int(f.Fd()), base: base, off: base, max: max(1, min(fileWritesAhead, credits))}
	fs.jobs = make(chan fileJob, fs.max)
	fs.done = make(chan struct{})
	go fs.run()
	return fs
}

// run writes the queued payloads in order until jobs is closed. After a
// failed write it writes nothing more: the stream fails at that one.
func (fs *fileSink) run() {
	defer close(fs.done)
	var failed error
	for j := range fs.jobs {
		if failed == nil {
			j.w.N, j.w.Err = pwriteFull(fs.fd, j.p, j.off)
			if j.w.Err != nil {
				j.w.Err = fmt.Errorf("write at offset %d: %w", j.off, j.w.Err)
				failed = j.w.Err
			}
		} else {
			j.w.Err = failed
		}
		close(j.w.Done)
	}
}

func (fs *fileSink) Start(buf int, p []byte) {
	w := &Write{Buf: buf, Done: make(chan struct{})}
	fs.queue = append(fs.queue, w)
	fs.jobs <- fileJob{w: w, p: p, off: fs.off}
	fs.off += int64(len(p))
}

func (fs *fileSink) Pending() int   { return len(fs.queue) }
func (fs *fileSink) Limit() int     { return fs.max }
func (fs *fileSink) Oldest() *Write { return fs.queue[0] }
func (fs *fileSink) Retire()        { fs.queue = fs.queue[1:] }

func (fs *fileSink) Close(written int64) {
	close(fs.jobs)
	<-fs.done
	_, _ = fs.f.Seek(fs.base+written, io.SeekStart)
}

func (fs *fileSink) Describe() string { return "pwrite" }

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
