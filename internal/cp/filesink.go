package cp

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// sink is where a receiving side writes the stream: Writer is the output
// for pipe.Receive; Finish puts the result in place once the stream has
// arrived whole, Abort ends a failed one, after written bytes of it were
// written.
type sink interface {
	Writer() io.Writer
	Finish() error
	Abort(written int64)
}

// fileSink receives one regular file. It writes to a partial file next to
// the destination (see partialName) and renames it into place only when
// the stream has arrived whole, so a failed copy never leaves a partial
// file under the destination's name, and nothing is written through what
// is there: a file or a symbolic link there is replaced (the link itself,
// not what it points to); a directory, device or other special file is
// refused and stays. A failed copy keeps its partial file, cut to what
// was written in order (an exact prefix), for a copy that resumes it.
type fileSink struct {
	f       *os.File
	partial string
	final   string
	req     Request
	umask   fs.FileMode
	started bool  // the stream's start is settled (see start)
	base    int64 // where the stream's bytes go in the file
	stale   bool  // a partial copy of another version of the source was removed
}

// newFileSink opens the output for a file-mode request: the partial file
// of this version of the source, locked against other copies. Unless
// req.Resume, it starts empty, and the stream starts at once.
func newFileSink(req Request) (*fileSink, error) {
	dst := expandHome(req.Dest)
	// DST naming a directory, through a link or not, means the source's
	// name in it.
	fi, err := os.Stat(dst)
	switch {
	case err == nil && fi.IsDir():
		dst = filepath.Join(dst, req.Name)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, setupf("destination %s: %w", dst, err)
	}
	fi, err = os.Lstat(dst)
	if err := replaceable(dst, fi, err); err != nil {
		return nil, setupf("destination %w", err)
	}
	if err := checkDir(filepath.Dir(dst)); err != nil {
		return nil, err
	}
	s := &fileSink{partial: partialName(dst, req.Contents), final: dst, req: req, umask: umask()}
	s.stale = removeStale(dst, s.partial)
	if s.f, err = openPartial(s.partial, fs.FileMode(req.Perm)&fs.ModePerm); err != nil {
		return nil, err
	}
	if !req.Resume {
		if err := s.start(0, offer{Block: minBlock}); err != nil {
			s.f.Close()
			return nil, setupf("%v", err)
		}
	}
	return s, nil
}

// offer hashes what the partial file holds (see makeOffer).
func (s *fileSink) offer(key []byte) (offer, error) {
	fi, err := s.f.Stat()
	if err != nil {
		return offer{}, err
	}
	return makeOffer(s.f, fi.Size(), key, "", maxHashes)
}

// start settles where the stream starts: at, which the sending side chose
// after the offer o. The partial file is cut there.
func (s *fileSink) start(at int64, o offer) error {
	fi, err := s.f.Stat()
	if err != nil {
		return err
	}
	if !o.resumesAt(at) || at > fi.Size() {
		return fmt.Errorf("the sender would resume at byte %d of a partial copy of %d bytes (offered: %d in blocks of %d)", at, fi.Size(), o.Size, o.Block)
	}
	if err := cutTo(s.f, at); err != nil {
		return err
	}
	if _, err := s.f.Seek(at, io.SeekStart); err != nil {
		return err
	}
	s.started, s.base = true, at
	return nil
}

// Writer returns the file itself, so that pipe.Receive can see it is a
// regular file.
func (s *fileSink) Writer() io.Writer { return s.f }

// Finish sets the file's mode (exactly with Preserve, else less the umask)
// and, with Preserve, its times, closes it and renames it into place. A
// resumed copy must have the size the source had.
func (s *fileSink) Finish() error {
	mode := fileMode(s.req.Perm)
	if !s.req.Preserve {
		mode = fs.FileMode(s.req.Perm) & fs.ModePerm &^ s.umask
	}
	if err := s.f.Chmod(mode); err != nil {
		s.Abort(0)
		return err
	}
	if fi, err := s.f.Stat(); err != nil || s.base > 0 && fi.Size() != s.req.Size {
		s.f.Close()
		return fmt.Errorf("the resumed copy of %s has %d bytes, its source had %d when the copy started: it changed meanwhile (the partial copy %s is kept)", s.final, fi.Size(), s.req.Size, s.partial)
	}
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", s.final, err)
	}
	if s.req.Preserve {
		if err := os.Chtimes(s.partial, time.Unix(0, s.req.ATime), time.Unix(0, s.req.MTime)); err != nil {
			return err
		}
	}
	fi, err := os.Lstat(s.final)
	if err := replaceable(s.final, fi, err); err != nil {
		return fmt.Errorf("destination %w", err)
	}
	if err := os.Rename(s.partial, s.final); err != nil {
		return fmt.Errorf("put the file in place: %w", err)
	}
	return nil
}

// Abort cuts the partial file after the written bytes of the stream and
// closes it; an empty one is removed. Before the stream's start is
// settled, what the partial file holds is kept as it is.
func (s *fileSink) Abort(written int64) {
	if s.started {
		s.f.Truncate(s.base + written)
	}
	fi, err := s.f.Stat()
	s.f.Close()
	if err == nil && fi.Size() == 0 {
		os.Remove(s.partial)
	}
}

// partialName is where a copy of c to dst is written until it is complete:
// a hidden name next to dst that says which version of the source (its
// size and modification time) it holds, so that only a copy of that
// version resumes it.
func partialName(dst string, c Contents) string {
	v := sha256.Sum256(fmt.Appendf(nil, "%d %d", c.Size, c.Changed))
	return filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".rdmacp-"+hex.EncodeToString(v[:8])+partialSuffix)
}

// partialSuffix ends the names of partial files.
const partialSuffix = ".part"

// removeStale removes the partial files of dst but keep that no copy is
// writing (holds locked), and says whether there were any: partial copies
// of other versions of the source.
func removeStale(dst, keep string) bool {
	names, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), "."+globEscape(filepath.Base(dst))+".rdmacp-*"+partialSuffix))
	removed := false
	for _, name := range names {
		if name == keep {
			continue
		}
		if f, err := openPartial(name, 0); err == nil {
			os.Remove(name)
			f.Close()
			removed = true
		}
	}
	return removed
}

// globEscape quotes the characters filepath.Match gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// openPartial opens (creating it with perm if needed) the partial file
// name and locks it for this copy (see lockPartial).
func openPartial(name string, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return nil, setupf("%v", err) // an *fs.PathError: "open NAME: why"
	}
	return lockPartial(f)
}

// lockPartial locks f, a partial file just opened, for this copy, or
// closes it and fails. It must be a regular file of this user's with one
// link: never a link planted to make the copy write elsewhere.
func lockPartial(f *os.File) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, setupf("%s: not a regular file of this user's with one link: refused", f.Name())
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, setupf("%s: another rdmacp is copying to it (%v)", f.Name(), err)
	}
	return f, nil
}

// cutTo cuts f to size bytes if it holds more. A file that is already no
// longer is left alone: on ext4, cutting an empty file to 0 bytes makes
// its close write the file's data out at once (auto_da_alloc), a disk
// write for every file of a tree.
func cutTo(f *os.File, size int64) error {
	fi, err := f.Stat()
	if err != nil || fi.Size() <= size {
		return err
	}
	return f.Truncate(size)
}

// tempName returns a fresh hidden name next to dst.
func tempName(dst string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".rdmacp-"+hex.EncodeToString(b[:])), nil
}

// fileMode converts permission bits as in a Request to an fs.FileMode.
func fileMode(perm uint32) fs.FileMode {
	m := fs.FileMode(perm) & fs.ModePerm
	if perm&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if perm&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if perm&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// checkDir fails with a setup error unless dir is an existing directory.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return setupf("destination directory %s does not exist", dir)
		}
		return setupf("destination directory: %w", err)
	}
	if !fi.IsDir() {
		return setupf("%s is not a directory", dir)
	}
	return nil
}

// expandHome turns a leading "~/" (or a lone "~") into the home directory;
// other relative paths are relative to the working directory, which ssh
// makes the home directory.
func expandHome(p string) string {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return filepath.Clean(p)
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, p[1:])
	}
	return filepath.Clean("." + p[1:])
}

// setupf returns an error of kind conn.KindSetup (exit code 3).
func setupf(format string, args ...any) error {
	return conn.Errorf(conn.KindSetup, "", format, args...)
}
