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
	*extraction
	root *os.Root
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
	x := startExtraction(dir, func(ctx context.Context, r io.Reader) error { return extract(ctx, root, r, top, ms) })
	return &tarSink{extraction: x, root: root}, nil
}

// Finish ends the archive and waits for the extraction to complete.
func (s *tarSink) Finish() error {
	err := s.wait()
	s.root.Close()
	return err
}

// Abort stops the extraction. What was extracted stays.
func (s *tarSink) Abort() {
	s.stop()
	s.root.Close()
}

// extraction runs a function that extracts an archive as it arrives
// through a pipe, on a goroutine of its own.
type extraction struct {
	pw     *io.PipeWriter
	cancel context.CancelFunc // ends the extraction
	done   chan error         // the extraction's result
}

// startExtraction starts run, which extracts the archive it reads into
// dir (named in errors), until its context ends.
func startExtraction(dir string, run func(context.Context, io.Reader) error) *extraction {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	x := &extraction{pw: pw, cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := run(ctx, pr)
		if err == nil {
			_, err = io.Copy(io.Discard, pr) // the archive's end and padding
		}
		pr.CloseWithError(fmt.Errorf("extract into %s: %w", dir, errOr(err, io.ErrClosedPipe)))
		x.done <- err
	}()
	return x
}

// Writer returns the extraction's input.
func (x *extraction) Writer() io.Writer { return x.pw }

// wait ends the archive and returns the extraction's result once it has
// completed.
func (x *extraction) wait() error {
	x.pw.Close()
	err := <-x.done
	x.cancel()
	return err
}

// stop stops the extraction and waits for it to end.
func (x *extraction) stop() {
	x.pw.CloseWithError(errors.New("the stream failed"))
	x.cancel()
	<-x.done
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
