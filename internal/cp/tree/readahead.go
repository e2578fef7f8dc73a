package tree

import (
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// readAhead walks the sources on its own goroutine ahead of the archiver:
// it stats each entry and reads each small file whole, handing them over
// in the walk's order, in batches, with at most aheadBufs files' data in
// memory. A failure ends the walk and is handed over in the failed
// entry's place.
type readAhead struct {
	batches chan []walked
	batch   []walked      // the walk's entries not yet handed over
	taken   []walked      // the archiver's batch, from its next entry on
	free    chan []byte   // buffers for small files' data, aheadFile bytes and one more each
	stop    chan struct{} // closed by close: the archiver wants no more
	rs      *Resumption
}

// walked is one file, directory or link of the walk: where it is, its name
// in the archive, what Lstat said of it, and, for a small file read
// ahead, its data (at most one byte more than fi's size, if it grew).
type walked struct {
	path, name string
	fi         fs.FileInfo
	data       []byte // nil if not read ahead
	buf        []byte // data's buffer, to release
	err        error
}

// Read ahead: files of at most aheadFile bytes, aheadBufs of them, in
// batches of aheadBatch entries (fewer than aheadBufs, so that a batch
// is never short of a buffer held by the archiver), at most
// aheadBatches of them waiting.
const (
	aheadFile    = 64 << 10
	aheadBufs    = 64
	aheadBatch   = 32
	aheadBatches = 8
)

// newReadAhead starts walking srcs; the files offered in rs, if any, are
// not read ahead (see Resumption.resume). close stops the walk.
func newReadAhead(srcs []Source, rs *Resumption) *readAhead {
	r := &readAhead{
		batches: make(chan []walked, aheadBatches),
		free:    make(chan []byte, aheadBufs),
		stop:    make(chan struct{}),
		rs:      rs,
	}
	for range aheadBufs {
		r.free <- make([]byte, aheadFile+1)
	}
	go r.walk(srcs)
	return r
}

// next returns the next entry, or false after the last one.
func (r *readAhead) next() (walked, bool) {
	if len(r.taken) == 0 {
		b, ok := <-r.batches
		if !ok {
			return walked{}, false
		}
		r.taken = b
	}
	e := r.taken[0]
	r.taken = r.taken[1:]
	return e, true
}

// release gives back the buffer of e, once its data is written.
func (r *readAhead) release(e walked) {
	if e.buf != nil {
		r.free <- e.buf
	}
}

// close stops the walk; entries not taken are dropped.
func (r *readAhead) close() {
	close(r.stop)
	for range r.batches {
	}
}

// walk walks srcs in order, handing over each entry (see walkSource),
// until the end, a failure or close: of each source its directories
// first, then the rest. ext4 places a new directory by the directories
// made before it and a file in its directory's group: made one by one
// among the files, right after a like tree was deleted, the directories
// land among the deleted inodes, which the allocator then scans for
// every file (20,000 small files onto such a root file system: 5-8 s
// instead of 1.3-2.8 s when the directories come first, as rsync makes
// them).
func (r *readAhead) walk(srcs []Source) {
	defer close(r.batches)
	defer r.flush()
	for _, s := range srcs {
		for _, dirs := range []bool{true, false} {
			err := walkSource(s, dirs, func(p, name string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() != dirs {
					return nil
				}
				e := walked{err: err}
				if err == nil {
					e = r.load(p, name)
				}
				if !r.send(e) {
					return filepath.SkipAll
				}
				return e.err
			})
			if err != nil || r.stopped() {
				return
			}
		}
	}
}

// walkSource walks s, links on its path followed, and calls visit with
// each entry (where it is, its name in the archive) that s's rules do not
// exclude (nor one under an excluded directory) nor s.skip names, only
// directories if dirs, or with a failure; visit's error ends the walk, as
// in filepath.WalkDir, whose order and errors it has. Unlike WalkDir, it
// joins no path for an entry it passes over (a repeated copy's skipped
// files, a file in the walk of directories).
func walkSource(s Source, dirs bool, visit func(p, name string, d fs.DirEntry, err error) error) error {
	root, err := filepath.EvalSymlinks(s.Path)
	if err != nil {
		return visit("", "", nil, err)
	}
	w := sourceWalk{s: s, dirs: dirs, visit: visit}
	fi, err := os.Lstat(root)
	if err == nil {
		err = w.entry(root, "", s.Name, fs.FileInfoToDirEntry(fi))
	} else {
		err = visit(root, "", nil, err)
	}
	if err == filepath.SkipDir || err == filepath.SkipAll {
		return nil
	}
	return err
}

// sourceWalk is one walkSource.
type sourceWalk struct {
	s     Source
	dirs  bool
	visit func(p, name string, d fs.DirEntry, err error) error
}

// entry visits d, base in the directory dir (or dir itself if base is
// "") and named name in the archive, then, if it is a directory, what it
// holds, as walkSource says.
func (w sourceWalk) entry(dir, base, name string, d fs.DirEntry) error {
	switch {
	case w.dirs && !d.IsDir(), w.s.Rules.Match(name, d.IsDir()):
		return nil // and nothing under it
	case w.s.Skip[name] && !d.IsDir():
		return nil
	}
	p := filepath.Join(dir, base)
	if !w.s.Skip[name] {
		if err := w.visit(p, name, d, nil); err != nil || !d.IsDir() {
			return ignoreSkipDir(err, d)
		}
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		if err = w.visit(p, "", d, err); err != nil {
			return ignoreSkipDir(err, d)
		}
	}
	for _, c := range entries {
		if w.dirs && !c.IsDir() {
			continue
		}
		if err := w.entry(p, c.Name(), name+"/"+c.Name(), c); err == filepath.SkipDir {
			return nil // the rest of this directory is skipped
		} else if err != nil {
			return err
		}
	}
	return nil
}

// ignoreSkipDir is err, what a walk's visit of d returned, but nil for
// SkipDir on a directory: the walk goes on without what is under it.
func ignoreSkipDir(err error, d fs.DirEntry) error {
	if err == filepath.SkipDir && d.IsDir() {
		return nil
	}
	return err
}

// load stats the entry at p, which goes into the archive as name, and
// reads it if it is a small file without holes that the receiving side
// did not offer.
func (r *readAhead) load(p, name string) walked {
	e := walked{path: p, name: name}
	if e.fi, e.err = os.Lstat(p); e.err != nil {
		return e
	}
	if !e.fi.Mode().IsRegular() || e.fi.Size() > aheadFile || mayHaveHoles(e.fi) || r.rs.offered(e.name) {
		return e
	}
	select {
	case e.buf = <-r.free:
	case <-r.stop:
		return e
	}
	n, err := readWhole(p, e.buf[:e.fi.Size()+1])
	e.data, e.err = e.buf[:n], err
	return e
}

// send hands e over, with the batch it ends if it is full or failed;
// false if the archiver stopped.
func (r *readAhead) send(e walked) bool {
	r.batch = append(r.batch, e)
	if len(r.batch) < aheadBatch && e.err == nil && !r.stopped() {
		return true
	}
	return r.flush()
}

// flush hands the batch over; false if the archiver stopped.
func (r *readAhead) flush() bool {
	if r.stopped() {
		for _, e := range r.batch {
			r.release(e)
		}
		r.batch = nil
		return false
	}
	if len(r.batch) == 0 {
		return true
	}
	select {
	case r.batches <- r.batch:
		r.batch = nil
		return true
	case <-r.stop:
		return r.flush()
	}
}

// stopped says whether close was called.
func (r *readAhead) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// readWhole reads the file at p into b until b is full or the file ends,
// and returns how many bytes it read. b is one byte longer than the file
// as its stat saw it: a read that asks for that byte too and stops short
// of it has met the file's end, so that a small file takes one read, not
// two. Its errors are those of os.Open and of reading the *os.File it
// returns.
func readWhole(p string, b []byte) (int, error) {
	fd, err := retryEINTR(func() (int, error) { return unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for n < len(b) {
		m, err := retryEINTR(func() (int, error) { return unix.Read(fd, b[n:]) })
		if err != nil {
			return n, &fs.PathError{Op: "read", Path: p, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
		if n == len(b)-1 {
			break // short of the byte past the stat's size
		}
	}
	return n, nil
}

// retryEINTR calls f again while it fails with EINTR, as package os does.
func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}
