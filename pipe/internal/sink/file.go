package sink

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fileWritesAhead bounds the writes a fileSink queues.
const fileWritesAhead = 4

// fileSink writes to a regular file with pwrite(2), straight from the
// receive buffers, from the file's current offset, on a goroutine of its
// own: the writer checksums the next payloads while earlier ones are
// written. The writes run one at a time, in stream order, so that a
// receiver killed mid-stream leaves a prefix of the stream in the file,
// never a hole. Where the file system takes it, a payload in aligned
// memory at an aligned offset is written with O_DIRECT, but for its
// unaligned tail: the device reads the receive buffer, and the page
// cache is neither copied into nor filled. The file's offset is left
// after the bytes written, as a sequential writer leaves it.
type fileSink struct {
	f  *os.File
	fd int
	// direct is an O_DIRECT twin of fd, or -1: used by the write
	// goroutine alone, closed by Close.
	direct int
	base   int64
	off    int64 // where the next write starts
	max    int
	keep   int64    // sparse: blocks of zeros from here on are left out; -1: not sparse
	queue  []*Write // started, not retired
	jobs   chan fileJob
	done   chan struct{} // closed when the write goroutine has ended
}

// fileJob is one payload for the write goroutine.
type fileJob struct {
	w   *Write
	p   []byte
	off int64
}

// newFileSink returns a fileSink for f, or why f is not a regular file it
// can write (see offset). With sparse, blocks of zeros past the file's
// size at the start are left out (see pwriteSparse), and End extends the
// file to the end of the stream.
func newFileSink(f *os.File, credits int, sparse bool) (*fileSink, error) {
	base, size, err := offset(f)
	if err != nil {
		return nil, err
	}
	fs := &fileSink{f: f, fd: int(f.Fd()), direct: -1, base: base, off: base, max: max(1, min(fileWritesAhead, credits)), keep: -1}
	if sparse {
		fs.keep = size
	} else if base%directAlign == 0 {
		fs.direct = openDirect(f)
	}
	fs.jobs = make(chan fileJob, fs.max)
	fs.done = make(chan struct{})
	go fs.run()
	return fs, nil
}

// directAlign is the alignment O_DIRECT needs of buffers, offsets and
// lengths on the file systems that support it.
const directAlign = 4096

// openDirect opens f again for writing with O_DIRECT, or returns -1 where
// f was not opened for writing (the twin must not write where f cannot)
// or the file system does not take it (tmpfs before Linux 6.6, for one).
func openDirect(f *os.File) int {
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil || flags&unix.O_ACCMODE == unix.O_RDONLY {
		return -1
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// offset returns f's offset and size if f is a regular file with an
// offset, not in append mode (where Linux's pwrite ignores the offset);
// else why not.
func offset(f *os.File) (base, size int64, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("the output: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return 0, 0, fmt.Errorf("the output is not a regular file but a %s", kind(fi.Mode()))
	}
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("the output's flags: %w", err)
	}
	if flags&unix.O_APPEND != 0 {
		return 0, 0, errors.New("the output is a file opened for appending")
	}
	base, err = f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, 0, fmt.Errorf("the output's offset: %w", err)
	}
	return base, fi.Size(), nil
}

// kind names the type of a file that is not regular.
func kind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeCharDevice != 0:
		return "character device (a terminal?)"
	case m&os.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	}
	return "special file"
}

// run writes the queued payloads in order until jobs is closed. After a
// failed write it writes nothing more: the stream fails at that one.
func (fs *fileSink) run() {
	defer close(fs.done)
	var failed error
	for j := range fs.jobs {
		if failed == nil {
			j.w.N, j.w.Err = fs.pwrite(j.p, j.off)
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

// End gives a sparse file the length the stream's end makes it: the
// blocks of zeros at its end were left out. It never shortens a file.
func (fs *fileSink) End() error {
	if fs.keep < 0 {
		return nil
	}
	fi, err := fs.f.Stat()
	if err == nil && fi.Size() < fs.off {
		err = fs.f.Truncate(fs.off)
	}
	if err != nil {
		return fmt.Errorf("set the length of the sparse output: %w", err)
	}
	return nil
}

func (fs *fileSink) Close(written int64) int64 {
	close(fs.jobs)
	<-fs.done
	if fs.direct >= 0 {
		unix.Close(fs.direct)
		fs.direct = -1
	}
	n := written + finished(fs.queue)
	_, _ = fs.f.Seek(fs.base+n, io.SeekStart)
	return n
}

func (fs *fileSink) Describe() string {
	switch {
	case fs.keep >= 0:
		return "pwrite sparse"
	case fs.direct >= 0:
		return "pwrite O_DIRECT"
	}
	return "pwrite"
}

// pwrite writes all of p at off, leaving out blocks of zeros if the sink
// is sparse, with O_DIRECT what it can (see pwriteDirect).
func (fs *fileSink) pwrite(p []byte, off int64) (int, error) {
	if fs.keep >= 0 {
		return pwriteSparse(fs.fd, p, off, fs.keep)
	}
	n, err := fs.pwriteDirect(p, off)
	if err != nil {
		return n, err
	}
	m, err := pwriteFull(fs.fd, p[n:], off+int64(n))
	return n + m, err
}

// pwriteDirect writes the aligned start of p at off with O_DIRECT, if p's
// memory and off are aligned, and returns how much it wrote. A direct
// write that fails having written nothing (a file system that took
// O_DIRECT at open but not this write) is left to the cache, as every
// later one is.
func (fs *fileSink) pwriteDirect(p []byte, off int64) (int, error) {
	n := len(p) &^ (directAlign - 1)
	if fs.direct < 0 || n == 0 || off%directAlign != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign != 0 {
		return 0, nil
	}
	m, err := pwriteFull(fs.direct, p[:n], off)
	if err != nil && m == 0 {
		unix.Close(fs.direct)
		fs.direct = -1
		return 0, nil
	}
	return m, err
}

// holeBlock is the size of the blocks a sparse sink checks for zeros, on
// the file's offsets.
const holeBlock = 4096

// zeros is a block of zeros, to compare with.
var zeros [holeBlock]byte

// pwriteSparse writes p at off as pwriteFull does, but leaves out the
// blocks of zeros at or past keep (which read as zeros already, as holes
// when the file is made longer), like cp --sparse=always; blocks before
// keep are written, so that nothing of what the file held shows through.
// It counts what it left out as written.
func pwriteSparse(fd int, p []byte, off, keep int64) (int, error) {
	start := 0 // p[start:i] is to be written
	i := 0
	for i < len(p) {
		o := off + int64(i)
		n := min(len(p)-i, holeBlock-int(o%holeBlock))
		if o >= keep && bytes.Equal(p[i:i+n], zeros[:n]) {
			if m, err := pwriteFull(fd, p[start:i], off+int64(start)); err != nil {
				return start + m, err
			}
			start = i + n
		}
		i += n
	}
	m, err := pwriteFull(fd, p[start:], off+int64(start))
	return start + m, err
}

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
