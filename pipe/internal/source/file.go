package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fileReadsAhead bounds the positional reads a fileSource keeps in flight.
const fileReadsAhead = 4

// directAlign is the alignment O_DIRECT needs of buffers, offsets and
// lengths on the file systems that support it.
const directAlign = 4096

// fileSource reads a regular file straight into send buffers with up to
// fileReadsAhead pread(2)s in flight, from the file's current offset,
// and hands the buffers over in file order. Where the file system allows
// and the file is not already in the page cache it reads with O_DIRECT,
// so that the device writes into the registered buffers and the page
// cache is neither copied nor filled. When the stream ends the file's
// offset is left after the bytes read, as a sequential reader leaves it.
type fileSource struct {
	b      Buffers
	f      *os.File
	fd     int  // what preads read: f's, or an O_DIRECT twin of it
	direct bool // fd is the O_DIRECT twin, closed by close
	base   int64
	off    int64       // where the next read starts
	queue  []*fileRead // reads started, in file order
	ended  bool        // a read came back short: the end of the file
	reads  sync.WaitGroup
}

// fileRead is one pread into send buffer buf.
type fileRead struct {
	buf  int
	n    int
	err  error
	done chan struct{}
}

// newFileSource returns a fileSource for f, or nil if f is not a regular
// file whose offset can be read.
func newFileSource(f *os.File, b Buffers) *fileSource {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	base, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil
	}
	fs := &fileSource{b: b, f: f, fd: int(f.Fd()), base: base, off: base}
	if fd, ok := openDirect(f, fi.Size()-base, b); ok {
		fs.fd, fs.direct = fd, true
	}
	return fs
}

// openDirect opens f again with O_DIRECT if that can work and pays: the
// file system supports it, the buffers, chunk and offset are aligned, and
// the part to be read is mostly not in the page cache (mincore).
func openDirect(f *os.File, size int64, b Buffers) (int, bool) {
	if b.Chunk%directAlign != 0 || size < int64(b.Chunk) {
		return 0, false
	}
	for _, buf := range b.Bufs {
		if uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%directAlign != 0 {
			return 0, false
		}
	}
	base, err := f.Seek(0, io.SeekCurrent)
	if err != nil || base%directAlign != 0 || cached(f, base, size) {
		return 0, false
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	return fd, true
}

// cacheSample is how much of a file cached looks at.
const cacheSample = 64 << 20

// cached reports whether at least half of the first cacheSample bytes
// from off are in the page cache, where plain reads are faster than
// O_DIRECT ones.
func cached(f *os.File, off, size int64) bool {
	n := min(size, cacheSample)
	if n <= 0 {
		return true
	}
	m, err := unix.Mmap(int(f.Fd()), off, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return true
	}
	defer unix.Munmap(m)
	vec := make([]byte, (n+int64(os.Getpagesize())-1)/int64(os.Getpagesize()))
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return true
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return in*2 >= len(vec)
}

func (fs *fileSource) Next(ctx context.Context) (int, int, bool, error) {
	if err := fs.startReads(ctx); err != nil {
		return 0, 0, false, err
	}
	head := fs.queue[0]
	select {
	case <-head.done:
	case <-ctx.Done():
		return 0, 0, false, context.Cause(ctx)
	}
	fs.queue = fs.queue[1:]
	switch {
	case fs.ended || head.n == 0 && head.err == nil:
		fs.ended = true
		return head.buf, 0, true, nil // at or past the end: carries the end
	case head.n < fs.b.Chunk || head.err != nil:
		fs.ended = true
	}
	return head.buf, head.n, false, head.err
}

// startReads starts reads into free buffers: as many as are free, up to
// fileReadsAhead in flight, and at least one if none is in flight.
func (fs *fileSource) startReads(ctx context.Context) error {
	for len(fs.queue) < fileReadsAhead {
		var i int
		if len(fs.queue) == 0 {
			var err error
			if i, err = fs.b.Take(ctx); err != nil {
				return err
			}
		} else {
			select {
			case i = <-fs.b.Free:
			default:
				return nil
			}
		}
		if fs.ended {
			// The end-of-stream message needs a buffer but no read.
			r := &fileRead{buf: i, done: make(chan struct{})}
			close(r.done)
			fs.queue = append(fs.queue, r)
			return nil
		}
		fs.start(i)
	}
	return nil
}

// start reads the next chunk of the file into send buffer i.
func (fs *fileSource) start(i int) {
	r := &fileRead{buf: i, done: make(chan struct{})}
	fs.queue = append(fs.queue, r)
	off := fs.off
	fs.off += int64(fs.b.Chunk)
	fs.reads.Go(func() {
		defer close(r.done)
		r.n, r.err = preadFull(fs.fd, fs.b.Bufs[i][:fs.b.Chunk], off, fs.direct)
		if r.err != nil {
			r.err = fmt.Errorf("read at offset %d: %w", off, r.err)
		}
	})
}

func (fs *fileSource) Close(sent int64) {
	fs.reads.Wait()
	for _, r := range fs.queue {
		fs.b.Free <- r.buf
	}
	fs.queue = nil
	if fs.direct {
		unix.Close(fs.fd)
	}
	_, _ = fs.f.Seek(fs.base+sent, io.SeekStart)
}

func (fs *fileSource) Serial() bool { return false }

func (fs *fileSource) Describe() string {
	if fs.direct {
		return "pread O_DIRECT"
	}
	return "pread"
}

// preadFull reads len(p) bytes at off, or up to the end of the file. An
// O_DIRECT read that returns a length that is not aligned has reached the
// end (another read there would be refused).
func preadFull(fd int, p []byte, off int64, direct bool) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pread(fd, p[n:], off+int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
		if m == 0 || direct && n%directAlign != 0 {
			break
		}
	}
	return n, nil
}
