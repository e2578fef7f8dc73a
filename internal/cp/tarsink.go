package cp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// tarSink receives a tar archive and extracts it as it arrives (see
// extract) into the destination directory.
type tarSink struct {
	root *os.Root
	pr   *io.PipeReader
	pw   *io.PipeWriter
	stop context.CancelFunc // ends the extraction
	done chan error         // the extraction's result
}

// newTarSink prepares the destination of a tar-mode request: an existing
// directory, which receives the archive's top-level entries; or, for a
// single top-level entry, a new name in an existing directory, which that
// entry becomes. Modes are applied as the archive has them with
// req.Preserve, else less the umask and without setuid and setgid.
func newTarSink(req Request) (*tarSink, error) {
	dst := expandHome(req.Dest)
	dir, top := dst, ""
	fi, err := os.Stat(dst)
	switch {
	case err == nil && !fi.IsDir():
		return nil, setupf("destination %s exists and is not a directory", dst)
	case errors.Is(err, fs.ErrNotExist) && req.Single:
		dir, top = filepath.Dir(dst), filepath.Base(dst)
		if err := checkDir(dir); err != nil {
			return nil, err
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil, setupf("destination directory %s does not exist (with several sources DST must be a directory)", dst)
	case err != nil:
		return nil, setupf("destination %s: %v", dst, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, setupf("destination: %v", err)
	}
	ms := modes{preserve: req.Preserve, umask: umask()}
	pr, pw := io.Pipe()
	ctx, stop := context.WithCancel(context.Background())
	s := &tarSink{root: root, pr: pr, pw: pw, stop: stop, done: make(chan error, 1)}
	go func() {
		err := extract(ctx, root, pr, top, ms)
		if err == nil {
			_, err = io.Copy(io.Discard, pr) // the archive's padding
		}
		pr.CloseWithError(fmt.Errorf("extract into %s: %w", dir, errOr(err, io.ErrClosedPipe)))
		s.done <- err
	}()
	return s, nil
}

// Writer returns the extraction's input.
func (s *tarSink) Writer() io.Writer { return s.pw }

// Finish ends the archive and waits for the extraction to complete.
func (s *tarSink) Finish() error {
	s.pw.Close()
	err := <-s.done
	s.stop()
	s.root.Close()
	return err
}

// Abort stops the extraction. What was extracted stays.
func (s *tarSink) Abort(int64) {
	s.pw.CloseWithError(errors.New("the stream failed"))
	s.stop()
	<-s.done
	s.root.Close()
}

// umask returns the process's umask. It sets it for a moment, so it is
// called before anything is created.
func umask() fs.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return fs.FileMode(m) & fs.ModePerm
}

// errOr returns err, or fallback when err is nil.
func errOr(err, fallback error) error {
	if err == nil {
		return fallback
	}
	return err
}
