package tree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
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
	// noTmpfile says that a file unnamed until complete (see writeUnnamed)
	// could not be made here: the files go under their partial names.
	noTmpfile atomic.Bool
	// byPath says that this process may not link a file by its descriptor
	// alone (see linkFD).
	byPath atomic.Bool
	umask  fs.FileMode   // the process's, for the modes files are made with
	keep   *meta.Applier // what the files get besides modes and times
}

// writeJob is one file for writers.
type writeJob struct {
	s    spot
	data []byte
	meta fileMeta
	h    *tar.Header // for what keep gives it
}

// Small files: at most smallFile bytes, through poolWriters goroutines
// with poolBufs buffers between them and the archive's reader. Each file
// is a few system calls that may wait on the file system's locks and
// journal: 8 writers took 0.75-0.9x the time of 4 on 2 cores, in each of
// 7 paired rounds of 20,000 files.
const (
	smallFile   = 64 << 10
	poolWriters = 8
	poolBufs    = 2 * poolWriters
)

// newWriters starts the writers' goroutines, for a process whose umask
// is umask, giving each file what keep keeps; close stops them.
func newWriters(umask fs.FileMode, keep *meta.Applier) *writers {
	w := &writers{jobs: make(chan writeJob), free: make(chan []byte, poolBufs), names: map[string]bool{}, umask: umask, keep: keep}
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

// passes says whether the entry h, to be made at name, may go ahead of
// the files handed over: a directory not named as one of them, made
// without closing the directories they are written in (see dirs.of).
func (w *writers) passes(h *tar.Header, name string, ds *dirs) bool {
	return h.Typeflag == tar.TypeDir && !w.names[name] && ds.keepsOpen(name)
}

// under says whether name lies under a file handed over since the last
// wait: whether that file must be in place before name's way is checked.
func (w *writers) under(name string) bool {
	for d := filepath.Dir(name); d != "."; d = filepath.Dir(d) {
		if w.names[d] {
			return true
		}
	}
	return false
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
	w.keep.Wrote(s.name, true)
	w.wg.Add(1)
	w.jobs <- writeJob{s, b, meta, h}
	return nil
}

// run writes the files handed over until close.
func (w *writers) run() {
	defer w.done.Done()
	for j := range w.jobs {
		err := w.writeOne(j)
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

// writeOne writes the file of j into its directory: unnamed until it is
// complete (see writeUnnamed) where the file system can, else under its
// partial name (see writeSmall).
func (w *writers) writeOne(j writeJob) error {
	if !w.noTmpfile.Load() {
		ok, err := writeUnnamed(j.s.in.fd, j, w.umask, w.keep, &w.byPath)
		if ok || err != nil {
			return err
		}
		w.noTmpfile.Store(true)
	}
	return writeSmall(j.s.in.fd, j, w.keep)
}

// writeUnnamed writes the file of j into dirfd, its directory, which this
// extraction made, as a file without a name (O_TMPFILE) that gets its
// mode and times and then its name (linkat): complete under its name or
// absent, even if the process dies, in five calls (six where its mode
// is given after, see madeMode; more for what keep gives it) with no
// rename. It says
// false, leaving nothing, where the file system or kernel cannot
// do that. An earlier entry of the same name, which the archive put there,
// is replaced (see replaceWith). The file is made with its mode where
// that comes out exact (see madeMode), else given it. byPath is linkFD's.
func writeUnnamed(dirfd int, j writeJob, umask fs.FileMode, keep *meta.Applier, byPath *atomic.Bool) (bool, error) {
	mode, exact := madeMode(j.meta.mode, umask, j.s.in.plain)
	fd, err := unix.Openat(dirfd, ".", unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, mode)
	if err != nil {
		return false, nil
	}
	defer unix.Close(fd)
	for off := 0; off < len(j.data); {
		n, err := unix.Pwrite(fd, j.data[off:], int64(off))
		if err != nil {
			return true, entryErr("write", j.s.name, err)
		}
		off += n
	}
	if !exact {
		if err := unix.Fchmod(fd, meta.UnixMode(j.meta.mode)); err != nil {
			return true, entryErr("write", j.s.name, err)
		}
	}
	if err := keep.ApplyFD(meta.NewFile{FD: fd, UID: j.s.in.uid, GID: j.s.in.gid, Inherits: !j.s.in.plain}, j.s.name, j.h, j.meta.mode); err != nil {
		return true, err
	}
	ts := []unix.Timespec{timespec(orNow(j.meta.atime, j.meta.mtime)), timespec(j.meta.mtime)}
	if err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH); err != nil {
		return false, nil // a kernel before 5.8, or no such flag here
	}
	err = linkFD(fd, dirfd, j.s.base, byPath)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT): // no /proc
		return false, nil
	case errors.Is(err, unix.EEXIST): // an earlier entry of the same name
		err = replaceWith(fd, dirfd, j.s.base, partialName(j.s.base, j.meta.version), byPath)
	}
	if err != nil {
		return true, entryErr("write", j.s.name, err)
	}
	return true, nil
}

// madeMode returns the mode to make a file of mode m with, in a
// directory whose new files get the mode they are made with less umask
// (plain, see dir), and whether the file has m then: when m has none of
// umask's bits, nor setuid, setgid or sticky (which the kernel may drop).
// Else it is 0600, for a chmod to m once written.
func madeMode(m, umask fs.FileMode, plain bool) (uint32, bool) {
	if plain && m&^fs.ModePerm == 0 && m&umask == 0 {
		return uint32(m), true
	}
	return 0o600, false
}

// linkFD gives fd, a file without a name, the name base in dirfd: by the
// descriptor itself (AT_EMPTY_PATH, which needs CAP_DAC_READ_SEARCH)
// unless byPath, else, setting byPath once that is refused, through
// /proc/self/fd, a path the kernel has to look up for every file.
func linkFD(fd, dirfd int, base string, byPath *atomic.Bool) error {
	if !byPath.Load() {
		err := unix.Linkat(fd, "", dirfd, base, unix.AT_EMPTY_PATH)
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		byPath.Store(true)
	}
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, base, unix.AT_SYMLINK_FOLLOW)
}

// replaceWith puts fd, a complete file without a name, at base in dirfd in
// place of what is there: named partial first, then renamed over it (a
// directory in the way stays, and fails it). byPath is linkFD's.
func replaceWith(fd, dirfd int, base, partial string, byPath *atomic.Bool) error {
	if err := linkFD(fd, dirfd, partial, byPath); err != nil {
		return err
	}
	if err := unix.Renameat(dirfd, partial, dirfd, base); err != nil {
		unix.Unlinkat(dirfd, partial, 0)
		return err
	}
	return nil
}

// writeSmall writes the file of j into dirfd, its directory, which this
// extraction made: as writeFile does, under its partial name renamed into
// place once complete, but with a call for each step (seven) and no checks
// in the way, as nothing can be there but what the archive put (see dir).
// A failure removes the partial file: j's data is whole, nothing to resume.
// keep gives it what it keeps before it is closed.
func writeSmall(dirfd int, j writeJob, keep *meta.Applier) error {
	partial := partialName(j.s.base, j.meta.version)
	fd, err := unix.Openat(dirfd, partial, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return entryErr("write", j.s.name, err)
	}
	err = writeFD(fd, j.data, j.meta.mode)
	if err == nil {
		err = keep.ApplyFD(meta.NewFile{FD: fd, UID: j.s.in.uid, GID: j.s.in.gid, Inherits: !j.s.in.plain}, j.s.name, j.h, j.meta.mode)
	}
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
	return unix.Fchmod(fd, meta.UnixMode(m))
}

// timespec returns t for utimensat: a zero t leaves the time as it is.
func timespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(t.UnixNano())
}
