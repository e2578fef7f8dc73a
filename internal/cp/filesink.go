package cp

import (
	"crypto/rand"
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

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// sink is where the remote side writes the stream: Writer is the output
// for pipe.Receive; Finish puts the result in place once the stream has
// arrived whole, Abort removes what a failed stream left.
type sink interface {
	Writer() io.Writer
	Finish() error
	Abort()
}

// fileSink receives one regular file. It writes to a new temporary file
// next to the destination and renames it into place only when the stream
// has arrived whole, so a failed copy never leaves a partial file behind
// and nothing is written through what is at the destination: a file or a
// symbolic link there is replaced (the link itself, not what it points
// to); a directory, device or other special file is refused and stays.
type fileSink struct {
	f     *os.File
	tmp   string
	final string
	req   Request
}

// newFileSink opens the output for a file-mode request.
func newFileSink(req Request) (*fileSink, error) {
	dst := expandHome(req.Dest)
	// DST naming a directory, through a link or not, means the source's
	// name in it.
	fi, err := os.Stat(dst)
	switch {
	case err == nil && fi.IsDir():
		dst = filepath.Join(dst, req.Name)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, setupf("destination %s: %v", dst, err)
	}
	fi, err = os.Lstat(dst)
	if err := replaceable(dst, fi, err); err != nil {
		return nil, setupf("destination %v", err)
	}
	if err := checkDir(filepath.Dir(dst)); err != nil {
		return nil, err
	}
	tmp, err := tempName(dst)
	if err != nil {
		return nil, setupf("temporary name: %v", err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fs.FileMode(req.Perm)&fs.ModePerm)
	if err != nil {
		return nil, setupf("create %s: %v", tmp, err)
	}
	return &fileSink{f: f, tmp: tmp, final: dst, req: req}, nil
}

// Writer returns the file itself, so that pipe.Receive can see it is a
// regular file.
func (s *fileSink) Writer() io.Writer { return s.f }

// Finish sets the file's mode and times when asked to preserve them,
// closes it and renames it into place. Without that the file has the
// source's permission bits less the umask, from its creation.
func (s *fileSink) Finish() error {
	if s.req.Preserve {
		if err := s.f.Chmod(fileMode(s.req.Perm)); err != nil {
			s.Abort()
			return err
		}
	}
	if err := s.f.Close(); err != nil {
		s.remove()
		return fmt.Errorf("write %s: %w", s.final, err)
	}
	if s.req.Preserve {
		if err := os.Chtimes(s.tmp, time.Unix(0, s.req.ATime), time.Unix(0, s.req.MTime)); err != nil {
			s.remove()
			return err
		}
	}
	fi, err := os.Lstat(s.final)
	if err := replaceable(s.final, fi, err); err != nil {
		s.remove()
		return fmt.Errorf("destination %w", err)
	}
	if err := os.Rename(s.tmp, s.final); err != nil {
		s.remove()
		return fmt.Errorf("put the file in place: %w", err)
	}
	return nil
}

// Abort closes the file and removes the temporary one.
func (s *fileSink) Abort() {
	s.f.Close()
	s.remove()
}

func (s *fileSink) remove() {
	os.Remove(s.tmp)
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

// unixPerm converts an fs.FileMode's permission bits to the Unix form of
// a Request.
func unixPerm(m fs.FileMode) uint32 {
	p := uint32(m & fs.ModePerm)
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// checkDir fails with a setup error unless dir is an existing directory.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return setupf("destination directory %s does not exist", dir)
		}
		return setupf("destination directory: %v", err)
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
