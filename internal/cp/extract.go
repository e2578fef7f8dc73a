package cp

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
)

// dirMeta is a directory's mode and times, set once its contents are in,
// and its header, for what modes.keep keeps of it.
type dirMeta struct {
	name         string
	mode         fs.FileMode
	atime, mtime time.Time
	hdr          *tar.Header
}

// dirMetas are the modes and times to set at the end of an extraction:
// one record per directory, its first entry's, in the order they came,
// however many times the archive names it.
type dirMetas struct {
	list []dirMeta
	has  map[string]bool
}

// add records d, unless its directory has a record.
func (m *dirMetas) add(d dirMeta) {
	if m.has[d.name] {
		return
	}
	if m.has == nil {
		m.has = map[string]bool{}
	}
	m.has[d.name] = true
	m.list = append(m.list, d)
}

// modes says how an archive's modes are applied: exactly with preserve
// (setuid, setgid and sticky too), else less umask and without setuid and
// setgid, and without sticky on files, as a new file of one's own would be.
// umask is the process's: files are made with modes it must leave whole
// (see madeMode). keep applies what the copy keeps besides (nil: nothing).
type modes struct {
	preserve bool
	umask    fs.FileMode
	keep     *meta.Applier
}

// of returns the mode to give an entry of the archive with mode m.
func (ms modes) of(m fs.FileMode, dir bool) fs.FileMode {
	m &= fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
	if ms.preserve {
		return m
	}
	keep := fs.ModePerm
	if dir {
		keep |= fs.ModeSticky
	}
	return m & keep &^ ms.umask
}

// counter counts the bytes read through it: what arrived of the archive.
type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// extract writes the tar archive read from r into root, treating it as
// hostile: entry names must be relative and free of "..", and every file
// operation goes through root, which refuses to resolve a path (or a
// symbolic link on it) to anywhere outside. Regular files (sparse ones
// too), directories and symbolic links are created with the archive's
// permission bits as ms says and its modification times; any other entry
// type fails the extraction. Every entry must be what sc allows (see
// scope.check); if top is not empty, the first element of every name is
// replaced with it. It stops, failing, when ctx ends.
//
// Files and links are written under a temporary name and renamed into
// place, atomically replacing a file or link in the way (never writing
// through it); a directory, device or other special file in the way fails
// the extraction and stays. Existing directories are kept and merged into;
// a link on an entry's way, even to inside, fails it (see checkParents).
// Directory modes and times are set at the end, deepest first, so that
// read-only directories can still be filled: those of the directories it
// made, and of existing ones only with -p or on a resume (as scp, which
// leaves an existing directory's mode alone without -p).
//
// A regular file is written under its partial name (see partialName),
// which a failed extraction keeps, cut to what arrived, for a resume. An
// entry that resumes a file (see resumeRecord) goes on from one of the
// files that rr lists (by name in the archive), and only from those. t,
// if not nil, counts the entries and their data as they are written.
func extract(ctx context.Context, root *os.Root, r io.Reader, sc scope, top string, ms modes, rr *resumed, t *tally) error {
	arrived := &counter{r: r}
	tr := tar.NewReader(arrived)
	x := &placer{ctx: ctx, root: root, top: top, ms: ms, rr: rr, arrived: arrived, data: t.reader(tr),
		buf: make([]byte, copyBuf), ds: newDirs(root), seen: map[string]bool{}}
	defer x.ds.close()
	w := newWriters(ms.umask, ms.keep)
	defer w.close()
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name, err := entryName(h.Name, top)
		if err != nil {
			return err
		}
		if w.under(name) {
			if err := w.wait(); err != nil {
				return err
			}
		}
		if err := checkEntry(root, h, name, sc, x.seen, rr); err != nil {
			return err
		}
		if err := ms.keep.Check(h, name); err != nil {
			return err
		}
		if ok, err := handOver(ctx, w, x.ds, x.data, h, name, ms); ok || err != nil {
			if err != nil {
				return err
			}
			t.entry(h.Typeflag)
			continue
		}
		if !w.passes(h, name, x.ds) {
			if err := w.wait(); err != nil {
				return err
			}
		}
		if err := x.place(h, name); err != nil {
			return err
		}
		t.entry(h.Typeflag)
	}
	if err := w.wait(); err != nil {
		return err
	}
	return setDirs(root, x.dirs.list, ms.keep)
}

// placer is what one extract writes into and has made, beside the
// archive's reader.
type placer struct {
	ctx     context.Context
	root    *os.Root
	top     string
	ms      modes
	rr      *resumed
	arrived *counter  // the archive's bytes as they arrive, for a resume's cut
	data    io.Reader // the entries' data, counted for the progress line
	buf     []byte
	ds      *dirs
	dirs    dirMetas        // the directories whose modes and times are set at the end
	seen    map[string]bool // directories known to be real ones (see checkParents)
}

// place makes entry h, named name, here itself: a directory (its modes and
// times kept for the end), a file, a link or, with -D, a special file.
func (x *placer) place(h *tar.Header, name string) error {
	switch h.Typeflag {
	case tar.TypeDir:
		made, err := x.ds.mkdir(name)
		if err != nil {
			return err
		}
		x.seen[name] = true
		if made || x.ms.preserve || x.rr != nil || x.ms.keep.Applies() {
			x.dirs.add(dirMeta{name, x.ms.of(h.FileInfo().Mode(), true), h.AccessTime, h.ModTime, h})
		}
		return nil
	case tar.TypeReg, tar.TypeGNUSparse:
		return x.file(h, name)
	case tar.TypeSymlink:
		if err := makeLink(x.root, name, h.Linkname); err != nil {
			return err
		}
		return keepEntry(x.ds, x.ms, name, h, 0)
	}
	return makeKept(x.root, x.ds, name, x.top, h, x.ms)
}

// file writes the regular file h, named name: anew, or on from the
// partial copy a resume offered.
func (x *placer) file(h *tar.Header, name string) error {
	write := func(f *os.File, base int64) error { return writeData(x.ctx, f, x.data, x.arrived, x.buf, base) }
	meta := metaOf(h, x.ms)
	var err error
	if at, ok := h.PAXRecords[resumeRecord]; ok {
		err = x.rr.resume(x.root, name, h, at, write, meta)
	} else {
		err = writeEntry(x.ds, name, write, meta, isSparse(h))
	}
	if err != nil {
		return err
	}
	return keepEntry(x.ds, x.ms, name, h, meta.mode)
}

// setDirs gives the directories of dirs their modes, what keep keeps of
// them and their times, the last made first, once nothing more is written
// in them.
func setDirs(root *os.Root, dirs []dirMeta, keep *meta.Applier) error {
	for _, d := range slices.Backward(dirs) {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
		if err := keepDir(root, d, keep); err != nil {
			return err
		}
		if err := root.Chtimes(d.name, orNow(d.atime, d.mtime), d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// copyBuf is the size of extract's buffer; holeBlock the size of the
// blocks it checks for zeros where a read was partly holes.
const (
	copyBuf   = 256 << 10
	holeBlock = 4096
)

// writeData writes the current entry of tr to f, a new empty file (or, for
// a resumed entry, one holding exactly the file's first base bytes), with
// buf. What arrived in the archive is written; the holes of a sparse
// entry, which the archive only describes, are skipped (and the size set
// at the end), so that the file takes no more room than what arrived,
// however big the entry says it is. It stops when ctx ends: skipping a
// huge hole reads nothing from the stream.
func writeData(ctx context.Context, f *os.File, tr io.Reader, arrived *counter, buf []byte, base int64) error {
	off, end := base, base // end: where the file ends as written, -1 if unknown
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		before := arrived.n
		n, err := tr.Read(buf)
		if n > 0 {
			var werr error
			switch arrived.n - before {
			case int64(n): // all of it arrived
				_, werr = f.WriteAt(buf[:n], off)
				end = off + int64(n)
			case 0: // all of it a hole
			default:
				werr, end = writeSparse(f, buf[:n], off), -1
			}
			if werr != nil {
				return werr
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if end == off {
		return nil
	}
	return f.Truncate(off)
}

// zeros is a block of zeros, to compare with.
var zeros [holeBlock]byte

// writeSparse writes b at off in f, skipping the blocks of zeros (those
// of holes), block by block as the file's offsets go.
func writeSparse(f *os.File, b []byte, off int64) error {
	for len(b) > 0 {
		n := min(len(b), holeBlock-int(off%holeBlock))
		if !bytes.Equal(b[:n], zeros[:n]) {
			if _, err := f.WriteAt(b[:n], off); err != nil {
				return err
			}
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// entryName checks an archive entry's name and returns it as a local
// relative path, with its first element replaced by top if top is set.
func entryName(name, top string) (string, error) {
	if name == "" || len(name) > maxPathLen || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("archive entry %.64q: empty, too long or with a NUL byte", name)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("archive entry %q: absolute path refused", name)
	}
	if slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("archive entry %q: '..' refused", name)
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", fmt.Errorf("archive entry %q: names no file", name)
	}
	if top != "" {
		_, rest, _ := strings.Cut(clean, "/")
		clean = path.Join(top, rest)
	}
	return filepath.FromSlash(clean), nil
}

// checkEntry checks an archive entry h, to be written at name under root,
// before anything of it is written: it must be what sc allows, resume only
// a file that rr offered, and go only through real directories (see
// checkParents, which seen is for).
func checkEntry(root *os.Root, h *tar.Header, name string, sc scope, seen map[string]bool, rr *resumed) error {
	if err := sc.check(h); err != nil {
		return err
	}
	if _, ok := h.PAXRecords[resumeRecord]; ok && !rr.offers(h) {
		return &unasked{h.Name, "resumes a file this side did not offer"}
	}
	return checkParents(root, name, seen)
}

// checkParents checks that the directories on the way to name under root
// are real directories, never links (not even to inside: an entry goes
// only where the archive's own directories, or real ones in their place,
// lead), from the top down, and remembers them in seen.
func checkParents(root *os.Root, name string, seen map[string]bool) error {
	var todo []string
	for d := filepath.Dir(name); d != "." && !seen[d]; d = filepath.Dir(d) {
		todo = append(todo, d)
	}
	for _, d := range slices.Backward(todo) {
		fi, err := root.Lstat(d)
		if err != nil {
			return fmt.Errorf("archive entry %q: %w", name, entryErr("lstat", d, err))
		}
		if !fi.IsDir() {
			return fmt.Errorf("archive entry %q: %q is not a directory here (a link is not followed)", name, d)
		}
		seen[d] = true
	}
	return nil
}

// entryErr describes a failed op on archive entry name, the name quoted
// once (the remote side chose it: it may hold what a terminal acts on).
func entryErr(op, name string, err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &le):
		err = le.Err
	}
	return fmt.Errorf("%s %q: %w", op, name, err)
}

// fileMeta is what an archive says of a regular file besides its data.
type fileMeta struct {
	mode         fs.FileMode
	atime, mtime time.Time
	version      Contents // its size and modification time, for its partial name
}

// metaOf returns what the file entry h says besides its data, its mode
// applied as ms says.
func metaOf(h *tar.Header, ms modes) fileMeta {
	return fileMeta{mode: ms.of(h.FileInfo().Mode(), false), atime: h.AccessTime, mtime: h.ModTime, version: Contents{Size: h.Size, Changed: h.ModTime.UnixNano()}}
}

// handOver hands the file entry h, to be written at name, over to w if w
// takes it (see writers.takes) and its directory is open in ds; it says
// whether it did. It stops, failing, when ctx has ended.
func handOver(ctx context.Context, w *writers, ds *dirs, tr io.Reader, h *tar.Header, name string, ms modes) (bool, error) {
	d, ok := ds.open[filepath.Dir(name)]
	if !ok {
		return false, nil
	}
	s := spot{root: d.root, base: filepath.Base(name), name: name, in: d}
	if !w.takes(h, s) {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	return true, w.write(tr, h, s, metaOf(h, ms))
}

// writeEntry writes the file name with data and meta (see writeFile) in
// its directory, open in ds.
func writeEntry(ds *dirs, name string, data func(*os.File, int64) error, meta fileMeta, sparse bool) error {
	s, err := ds.spot(name)
	if err != nil {
		return err
	}
	return writeFile(s, data, meta, sparse)
}

// spot is where a file of an extraction goes: base in the directory
// root, name under the extraction's root (for errors); in is that
// directory, open (see dirs), or nil.
type spot struct {
	root *os.Root
	base string
	name string
	in   *dir
}

// fresh says that the spot's directory was made by this extraction, so
// that nothing is in its way (see dir).
func (s spot) fresh() bool { return s.in != nil && s.in.fresh }

// writeFile makes the file at s with data and meta: under its partial
// name, renamed into place once complete (see clearWay). A failure keeps
// the partial file, holding what arrived, for a resume; but not that of
// a sparse entry, whose data does not arrive in order. In a fresh
// directory the partial file must be new.
func writeFile(s spot, data func(*os.File, int64) error, meta fileMeta, sparse bool) error {
	if !s.fresh() {
		if err := clearWay(s.root, s.base, s.name); err != nil {
			return err
		}
	}
	partial := partialName(s.base, meta.version)
	f, err := openPartialIn(s.root, partial, 0o600, s.fresh())
	if err != nil {
		return fmt.Errorf("archive entry %q: %w", s.name, err)
	}
	if !s.fresh() {
		if err := cutTo(f, 0); err != nil {
			f.Close()
			return entryErr("write", s.name, err)
		}
	}
	return finishFile(s, f, partial, data(f, 0), meta, sparse)
}

// finishFile completes the file that f, open at partial in s's directory,
// holds once its data has been written (with the outcome err): its mode
// and times, and its rename to s. On a failure the partial file is kept,
// unless drop or it is empty.
func finishFile(s spot, f *os.File, partial string, err error, meta fileMeta, drop bool) error {
	if err == nil {
		err = f.Chmod(meta.mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.root.Chtimes(partial, orNow(meta.atime, meta.mtime), meta.mtime)
	}
	if err == nil && !s.fresh() {
		err = clearWay(s.root, s.base, s.name)
	}
	if err == nil {
		err = s.root.Rename(partial, s.base)
	}
	if err != nil {
		if fi, serr := s.root.Lstat(partial); drop || serr != nil || fi.Size() == 0 {
			s.root.Remove(partial)
		}
		return entryErr("write", s.name, err)
	}
	if s.in != nil {
		s.in.dropPartials(s.base)
	} else {
		dropPartials(s.root, s.base, "")
	}
	return nil
}

// makeLink makes the symbolic link name pointing to target, under a
// temporary name renamed into place (see clearWay). The target is stored
// as it came: a link may point anywhere, but nothing is ever written
// through one (see checkParents).
func makeLink(root *os.Root, name, target string) error {
	if target == "" || len(target) > maxPathLen || strings.ContainsRune(target, 0) {
		return fmt.Errorf("archive entry %q: link target empty, too long or with a NUL byte", name)
	}
	if err := clearWay(root, name, name); err != nil {
		return err
	}
	tmp, err := tempName(name)
	if err != nil {
		return err
	}
	if err := root.Symlink(target, tmp); err != nil {
		return entryErr("make link", name, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		root.Remove(tmp)
		return entryErr("make link", name, err)
	}
	return nil
}

// clearWay checks what is at base in root, which a file or link is about
// to replace (see replaceable); name is what errors call it.
func clearWay(root *os.Root, base, name string) error {
	fi, err := root.Lstat(base)
	return replaceable(name, fi, err)
}

// replaceable says whether what is at name, as Lstat described it with
// fi and err, may be replaced with a file or link: nothing, a regular file
// or a symbolic link may (a rename replaces the entry, not what a link
// points to); a directory, device or other special file may not, and
// stays.
func replaceable(name string, fi fs.FileInfo, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%q is a directory: not replaced with a file or link", name)
	case !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0:
		return fmt.Errorf("%q is a %s: not replaced with a file or link", name, special(fi.Mode()))
	}
	return nil
}

// special names the type of a special file.
func special(m fs.FileMode) string {
	switch {
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// orNow returns t, or fallback when t is unset (an archive without access
// times).
func orNow(t, fallback time.Time) time.Time {
	if t.IsZero() {
		return fallback
	}
	return t
}
