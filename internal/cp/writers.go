package cp

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// writers writes the small files of an extraction that go into
// directories it made on a few goroutines, while the archive is read on:
// such a file is whole in memory, and nothing but the archive's own
// entries is where it lands, so the order of their writes does not
// matter. Each file is still complete under its name or absent from it
// (see writeFile). Anything else waits for the files handed over (see
// wait), so that a later entry of the same name, or the closing of a
// directory, comes after them.
type writers struct {
	jobs  chan writeJob
	free  chan []byte     // buffers for the files' data: at most cap(free) in memory
	names map[string]bool // the files handed over since the last wait
	wg    sync.WaitGroup  // the files handed over and not yet written
	done  sync.WaitGroup  // the goroutines
	mu    sync.Mutex
	err   error // the first failure
}

// writeJob is one file for writers.
type writeJob struct {
	s    spot
	data []byte
	meta fileMeta
}

// Small files: at most smallFile bytes, through poolWriters goroutines
// with poolBufs buffers between them and the archive's reader.
const (
	smallFile   = 64 << 10
	poolWriters = 4
	poolBufs    = 2 * poolWriters
)

// newWriters starts the writers' goroutines; close stops them.
func newWriters() *writers {
	w := &writers{jobs: make(chan writeJob), free: make(chan []byte, poolBufs), names: map[string]bool{}}
	for range poolBufs {
		w.free <- make([]byte, smallFile)
	}
	w.done.Add(poolWriters)
	for range poolWriters {
		go w.run()
	}
	return w
}

// takes says whether the file entry h, to be written at s, goes to the
// writers: a whole small file, not resumed nor sparse, in a directory this
// extraction made, not handed over before since the last wait.
func (w *writers) takes(h *tar.Header, s spot) bool {
	_, resume := h.PAXRecords[resumeRecord]
	return h.Typeflag == tar.TypeReg && h.Size <= smallFile && !resume && !isSparse(h) && s.fresh() && !w.names[s.name]
}

// write reads the data of the current entry of tr, h.Size bytes, and
// hands the file over, to be written at s with meta. It returns the
// first failure of a file handed over before, if any.
func (w *writers) write(tr io.Reader, h *tar.Header, s spot, meta fileMeta) error {
	if err := w.failed(); err != nil {
		return err
	}
	b := (<-w.free)[:h.Size]
	if _, err := io.ReadFull(tr, b); err != nil {
		w.free <- b
		return fmt.Errorf("read archive: %w", err)
	}
	w.names[s.name] = true
	w.wg.Add(1)
	w.jobs <- writeJob{s, b, meta}
	return nil
}

// run writes the files handed over until close.
func (w *writers) run() {
	defer w.done.Done()
	for j := range w.jobs {
		err := writeSmall(j.s.in.fd, j)
		w.free <- j.data
		if err != nil {
			w.mu.Lock()
			w.err = errOr(w.err, err)
			w.mu.Unlock()
		}
		w.wg.Done()
	}
}

// failed returns the first failure of a file handed over, if any.
func (w *writers) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// wait waits until every file handed over is written and returns the
// first failure, if any.
func (w *writers) wait() error {
	w.wg.Wait()
	clear(w.names)
	return w.failed()
}

// close waits for the files handed over and stops the goroutines.
func (w *writers) close() {
	w.wg.Wait()
	close(w.jobs)
	w.done.Wait()
}

// writeSmall writes the file of j into dirfd, its directory, which this
// extraction made: as writeFile does, under its partial name renamed into
// place once complete, but with a call for each step (seven) and no checks
// in the way, as nothing can be there but what the archive put (see dir).
// A failure removes the partial file: j's data is whole, nothing to resume.
func writeSmall(dirfd int, j writeJob) error {
	partial := partialName(j.s.base, j.meta.version)
	fd, err := unix.Openat(dirfd, partial, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return entryErr("write", j.s.name, err)
	}
	err = writeFD(fd, j.data, j.meta.mode)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		ts := []unix.Timespec{timespec(orNow(j.meta.atime, j.meta.mtime)), timespec(j.meta.mtime)}
		err = unix.UtimesNanoAt(dirfd, partial, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil {
		err = unix.Renameat(dirfd, partial, dirfd, j.s.base)
	}
	if err != nil {
		unix.Unlinkat(dirfd, partial, 0)
		return entryErr("write", j.s.name, err)
	}
	return nil
}

// writeFD locks fd, a new file, as a partial copy (see lockPartial),
// writes b to it and gives it mode m.
func writeFD(fd int, b []byte, m fs.FileMode) error {
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return err
	}
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if err != nil {
			return err
		}
		off += n
	}
	return unix.Fchmod(fd, unixMode(m))
}

// unixMode returns the system's mode bits for m's permission bits and
// setuid, setgid and sticky bits.
func unixMode(m fs.FileMode) uint32 {
	o := uint32(m.Perm())
	for _, b := range []struct {
		go_ fs.FileMode
		sys uint32
	}{{fs.ModeSetuid, unix.S_ISUID}, {fs.ModeSetgid, unix.S_ISGID}, {fs.ModeSticky, unix.S_ISVTX}} {
		if m&b.go_ != 0 {
			o |= b.sys
		}
	}
	return o
}

// timespec returns t for utimensat: a zero t leaves the time as it is.
func timespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(t.UnixNano())
}
