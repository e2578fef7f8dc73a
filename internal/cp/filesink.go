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
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// sink is where the remote side writes the stream: Writer is the output
// for pipe.Receive; Finish puts the result in place once the stream has
// arrived whole, Abort removes what a failed stream left.
type sink interface {
	Writer() io.Writer
	Finish() error
	Abort()
}

// fileSink receives one regular file. It writes to a temporary file next
// to the destination and renames it into place only when the stream has
// arrived whole, so a failed copy never leaves a partial file behind. A
// destination that exists and is not a regular file (say /dev/null) is
// written in place.
type fileSink struct {
	f     *os.File
	tmp   string // the temporary name; empty when writing in place
	final string
	req   Request
}

// newFileSink opens the output for a file-mode request.
func newFileSink(req Request) (*fileSink, error) {
	dst := expandHome(req.Dest)
	fi, err := os.Stat(dst)
	switch {
	case err == nil && fi.IsDir():
		dst = filepath.Join(dst, req.Name)
		fi, err = os.Stat(dst)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, setupf("destination %s: %v", dst, err)
	}
	if err == nil && !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, setupf("destination %s is a directory (the file's name in it is taken by a directory)", dst)
		}
		f, err := os.OpenFile(dst, os.O_WRONLY, 0)
		if err != nil {
			return nil, setupf("open destination: %v", err)
		}
		return &fileSink{f: f, final: dst, req: req}, nil
	}
	if err := checkDir(filepath.Dir(dst)); err != nil {
		return nil, err
	}
	tmp, err := tempName(dst)
	if err != nil {
		return nil, setupf("temporary name: %v", err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(req.Perm)&fs.ModePerm)
	if err != nil {
		return nil, setupf("create %s: %v", tmp, err)
	}
	return &fileSink{f: f, tmp: tmp, final: dst, req: req}, nil
}

// Writer returns the file itself, so that pipe.Receive can see it is a
// regular file.
func (s *fileSink) Writer() io.Writer { return s.f }

// Finish closes the file, sets its mode and times when asked to preserve
// them, and renames it into place.
func (s *fileSink) Finish() error {
	if err := s.f.Close(); err != nil {
		s.remove()
		return fmt.Errorf("write %s: %w", s.final, err)
	}
	if s.tmp == "" {
		return nil
	}
	if s.req.Preserve {
		if err := os.Chmod(s.tmp, fileMode(s.req.Perm)); err != nil {
			s.remove()
			return err
		}
		if err := os.Chtimes(s.tmp, time.Unix(0, s.req.ATime), time.Unix(0, s.req.MTime)); err != nil {
			s.remove()
			return err
		}
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
	if s.tmp != "" {
		os.Remove(s.tmp)
	}
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

// setupf returns an error of kind pipe.KindSetup (exit code 3).
func setupf(format string, args ...any) error {
	return pipe.Errorf(pipe.KindSetup, "", format, args...)
}
