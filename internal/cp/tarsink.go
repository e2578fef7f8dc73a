package cp

import (
	"bufio"
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

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
)

// tarSink receives a tar archive and extracts it as it arrives (see
// extract) into the destination directory. The extraction starts with the
// stream (Writer), after a resume's offers.
type tarSink struct {
	root    *os.Root
	dir     string
	top     string   // what the single top-level entry becomes, if not itself
	names   []string // the archive's top-level entries
	files   bool     // only regular files among them, nothing else (see Contents.Files)
	ms      modes
	resumed *resumed // what a resume offered (see offers)
	once    sync.Once
	x       *extraction
	tally   *tally // counts what the extraction writes, for the progress line; nil: nothing
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
		return nil, setupf("destination %s: %w", dst, err)
	}
	return openTarSink(req, dir, top)
}

// openTarSink prepares dir, an existing directory, for the archive that
// req describes, whose single top-level entry becomes top there if top is
// set.
func openTarSink(req Request, dir, top string) (*tarSink, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, setupf("destination: %w", err)
	}
	keep, _ := meta.Parse(req.Keep) // validated, or this side's own
	ms := modes{preserve: req.Preserve || keep.ACLs, umask: umask()}
	if keep.Any() {
		ms.keep = meta.NewApplier(keep, os.Geteuid() == 0, os.Stderr)
	}
	return &tarSink{root: root, dir: dir, top: top, names: req.Names, files: req.Files, ms: ms}, nil
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

// started starts the extraction, once, and returns it.
func (s *tarSink) started() *extraction {
	s.once.Do(func() {
		s.x = startExtraction(s.dir, func(ctx context.Context, r io.Reader) error {
			// Headers and small files: one read of the pipe for many.
			return extract(ctx, s.root, bufio.NewReaderSize(r, copyBuf), scope{s.names, s.files}, s.top, s.ms, s.resumed, s.tally)
		})
	})
	return s.x
}

// Writer starts the extraction and returns its input.
func (s *tarSink) Writer() io.Writer { return s.started().Writer() }

// Finish ends the archive and waits for the extraction to complete.
func (s *tarSink) Finish() error {
	err := s.started().wait()
	s.root.Close()
	return err
}

// Abort stops the extraction. What was extracted stays.
func (s *tarSink) Abort(int64) {
	s.started().stop()
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
