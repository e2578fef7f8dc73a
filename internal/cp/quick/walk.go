package quick

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// walkers is how many directories a walk reads at once: on a tree whose
// inodes are not cached yet, each lstat may wait for the disk.
const walkers = 4

// How says what a walk lists besides each entry's type, size, time and
// mode: with Hash each regular file's hash, with Marks (if not nil) the
// marks it returns for the entry base in the directory dirfd, at path,
// that st describes; what Leave
// (if not nil) says to leave out is, as what is under it (the copy's
// filter rules).
type How struct {
	Hash  bool
	Marks func(dirfd int, base, path string, st *unix.Stat_t) (Marks, error)
	Leave func(name string, isDir bool) bool
}

// Walk hands each entry of the tree at top, named under name, to each:
// top itself (not followed if it is a link) and, if it is a directory,
// everything under it, never through a link, each directory before what
// it holds, listed as how says. Names that are not valid UTF-8, longer than MaxPath, or whose
// entry's text is longer than MaxLine are left out (and what is under
// them): a peer cannot name them, so they are never skipped nor removed.
// A missing top lists nothing, and an entry gone while the walk reads its
// directory is not listed. Several directories are read at once; each is
// called on Walk's goroutine alone.
func Walk(top, name string, how How, each func(Entry) error) error {
	var st unix.Stat_t
	if err := unix.Lstat(top, &st); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return &os.PathError{Op: "lstat", Path: top, Err: err}
	}
	w := &walk{how: how, each: each, top: top}
	e, err := w.entryAt(unix.AT_FDCWD, top, top, name, &st)
	if err != nil || checkName(name) != nil || how.Leave != nil && how.Leave(name, e.Type == Dir) {
		return err
	}
	if err := w.emit(e); err != nil || e.Type != Dir {
		return err
	}
	return w.run(dirJob{filepath.Clean(top), name})
}

// walk is one Walk: what it lists and how much it has listed.
type walk struct {
	how            How
	each           func(Entry) error
	top            string
	entries, bytes int
	text           []byte
}

// dirJob is a directory to read: where it is and its name in the listing.
type dirJob struct{ path, name string }

// dirRead is what reading a directory found: its entries, the
// directories among them to read in turn, or why it failed.
type dirRead struct {
	entries []Entry
	dirs    []dirJob
	err     error
}

// run reads the directory first and all under it with walkers goroutines,
// handing the entries of each directory read to each on this goroutine,
// and only then reading the directories among them: each comes before
// what it holds.
func (w *walk) run(first dirJob) error {
	jobs, reads := make(chan dirJob), make(chan dirRead)
	defer close(jobs)
	for range walkers {
		go func() {
			for j := range jobs {
				reads <- w.read(j)
			}
		}()
	}
	pending, busy := []dirJob{first}, 0
	var err error
	for len(pending) > 0 && err == nil || busy > 0 {
		send, next := chan dirJob(nil), dirJob{}
		if len(pending) > 0 && err == nil {
			send, next = jobs, pending[len(pending)-1]
		}
		select {
		case send <- next:
			pending, busy = pending[:len(pending)-1], busy+1
		case r := <-reads:
			busy--
			if err == nil {
				err = r.err
			}
			for _, e := range r.entries {
				if err == nil {
					err = w.emit(e)
				}
			}
			pending = append(pending, r.dirs...)
		}
	}
	return err
}

// emit checks the bounds of the listing so far and hands e to each.
func (w *walk) emit(e Entry) error {
	w.entries, w.bytes = w.entries+1, w.bytes+len(e.Name)+len(e.Link)
	if w.entries > MaxEntries || w.bytes > MaxBytes {
		return fmt.Errorf("list %s: more than %d entries or %d bytes of names", w.top, MaxEntries, MaxBytes)
	}
	return w.each(e)
}

// read reads the directory of j: its entries in name order, but those
// left out (see Walk).
func (w *walk) read(j dirJob) dirRead {
	fd, err := unix.Open(j.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return dirRead{} // gone since its parent was read
	}
	if err != nil {
		return dirRead{err: &os.PathError{Op: "open", Path: j.path, Err: err}}
	}
	f := os.NewFile(uintptr(fd), j.path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return dirRead{err: err}
	}
	slices.Sort(names)
	r := dirRead{entries: make([]Entry, 0, len(names))}
	var text []byte
	var st unix.Stat_t
	for _, base := range names {
		n := j.name + "/" + base
		if err := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return dirRead{err: &os.PathError{Op: "lstat", Path: join(j.path, base), Err: err}}
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if checkName(n) != nil || w.how.Leave != nil && w.how.Leave(n, isDir) {
			continue
		}
		p := join(j.path, base)
		e, err := w.entryAt(fd, base, p, n, &st)
		if errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return dirRead{err: fmt.Errorf("list %s: %w", p, err)}
		}
		if !e.fits(&text) {
			continue
		}
		r.entries = append(r.entries, e)
		if isDir {
			r.dirs = append(r.dirs, dirJob{p, n})
		}
	}
	return r
}

// textBound bounds the bytes of an entry's text but its name and target:
// its type, mode, size, time, hash, marks and separators.
const textBound = 256

// fits says whether e's text is at most MaxLine bytes long, writing it
// into text only where its name and target are long enough to need it
// (quoted, a rune takes at most 10 bytes).
func (e Entry) fits(text *[]byte) bool {
	if textBound+10*(len(e.Name)+len(e.Link)) <= MaxLine {
		return true
	}
	*text = e.AppendText((*text)[:0])
	return len(*text) <= MaxLine
}

// join is filepath.Join(dir, base) for a clean dir and a plain base,
// without cleaning the result again.
func join(dir, base string) string {
	switch dir {
	case ".":
		return base
	case "/":
		return "/" + base
	}
	return dir + "/" + base
}

// entryAt describes the entry base in the directory dirfd, at path p and
// named n, which st describes.
func (w *walk) entryAt(dirfd int, base, p, n string, st *unix.Stat_t) (Entry, error) {
	e := Entry{Name: n, Type: typeOf(st.Mode), MTime: st.Mtim.Nano(), Mode: st.Mode & 0o7777}
	var err error
	switch e.Type {
	case File:
		e.Size = st.Size
		if st.Nlink > 1 {
			e.file = fileID{st.Dev, st.Ino}
		}
		if w.how.Hash {
			e.Hash, err = hashFile(dirfd, base)
		}
	case Link:
		e.Link, err = readlinkAt(dirfd, base)
	}
	if err == nil && w.how.Marks != nil {
		e.Marks, err = w.how.Marks(dirfd, base, p, st)
	}
	return e, err
}

// typeOf is the type of an entry of mode m (as stat gives it).
func typeOf(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return File
	case unix.S_IFDIR:
		return Dir
	case unix.S_IFLNK:
		return Link
	case unix.S_IFCHR, unix.S_IFBLK:
		return Device
	}
	return Special
}

// readlinkAt returns the target of the link base in dirfd: "" for one a
// peer cannot name, which compares as changed.
func readlinkAt(dirfd int, base string) (string, error) {
	buf := make([]byte, MaxPath+1)
	n, err := unix.Readlinkat(dirfd, base, buf)
	if err != nil {
		return "", err
	}
	if t := string(buf[:n]); n <= MaxPath && utf8.ValidString(t) {
		return t, nil
	}
	return "", nil
}
