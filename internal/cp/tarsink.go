package cp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// tarSink receives a tar archive and extracts it as it arrives (see
// extract) into the destination directory.
type tarSink struct {
	root    *os.Root
	dir     string
	top     string   // what the single top-level entry becomes, if not itself
	names   []string // the archive's top-level entries
	ms      modes
	resumed *resumed // what a resume offered (see offers)
	pr      *io.PipeReader
	pw      *io.PipeWriter
	once    sync.Once
	stop    context.CancelFunc // ends the extraction
	done    chan error         // the extraction's result
}

// newTarSink prepares the destination of a tar-mode request: an existing
// directory, which receives the archive's top-level entries; or, for a
// single top-level entry, a new name in an existing directory, which that
// entry becomes. Resuming, an existing DST (written without a trailing
// slash) that does not hold that entry is taken for such a new name,
// which the interrupted copy made. Modes are applied as the archive has
// them with req.Preserve, else less the umask and without setuid and
// setgid.
func newTarSink(req Request) (*tarSink, error) {
	dst := expandHome(req.Dest)
	dir, top := dst, ""
	fi, err := os.Stat(dst)
	switch {
	case err == nil && !fi.IsDir():
		return nil, setupf("destination %s exists and is not a directory", dst)
	case errors.Is(err, fs.ErrNotExist) && req.Single, err == nil && resumedNewName(req, dst):
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
	pr, pw := io.Pipe()
	return &tarSink{root: root, dir: dir, top: top, names: req.Names, ms: modes{preserve: req.Preserve, umask: umask()},
		pr: pr, pw: pw, done: make(chan error, 1)}, nil
}

// resumedNewName says whether dst, an existing directory, is where a
// resumed copy of a single top-level entry to a new name goes (see
// newTarSink).
func resumedNewName(req Request, dst string) bool {
	if !req.Resume || !req.Single || len(req.Names) != 1 || strings.HasSuffix(req.Dest, "/") {
		return false
	}
	_, err := os.Lstat(filepath.Join(dst, req.Names[0]))
	return errors.Is(err, fs.ErrNotExist)
}

// start starts the extraction, once.
func (s *tarSink) start() {
	s.once.Do(func() {
		ctx, stop := context.WithCancel(context.Background())
		s.stop = stop
		go func() {
			err := extract(ctx, s.root, s.pr, s.top, s.ms, s.resumed)
			if err == nil {
				_, err = io.Copy(io.Discard, s.pr) // the archive's padding
			}
			s.pr.CloseWithError(fmt.Errorf("extract into %s: %w", s.dir, errOr(err, io.ErrClosedPipe)))
			s.done <- err
		}()
	})
}

// Writer starts the extraction and returns its input.
func (s *tarSink) Writer() io.Writer {
	s.start()
	return s.pw
}

// Finish ends the archive and waits for the extraction to complete.
func (s *tarSink) Finish() error {
	s.start()
	s.pw.Close()
	err := <-s.done
	s.stop()
	s.root.Close()
	return err
}

// Abort stops the extraction. What was extracted stays.
func (s *tarSink) Abort(int64) {
	s.start()
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
