package tree

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
)

// SingleMode is the mode of a copy of the one regular file at p:
// proto.ModeSparse if it has holes, else proto.ModeFile (also when it cannot be
// opened or examined: the copy then says why).
func SingleMode(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return proto.ModeFile
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return proto.ModeFile
	}
	segs, err := dataSegments(f, fi.Size())
	if err != nil || dataLen(segs) == fi.Size() {
		return proto.ModeFile
	}
	return proto.ModeSparse
}

// sparseSink receives one regular file with holes, which arrives as a tar
// archive of one sparse entry: its data is written into a FileSink's file,
// holes left as holes, and the FileSink puts it in place as in file mode.
type sparseSink struct {
	*FileSink
	*extraction
}

// newSparseSink prepares the destination of a sparse-mode request.
func newSparseSink(req proto.Request) (*sparseSink, error) {
	req.Resume = false // its file is written out of order: nothing to resume
	fs, err := newFileSink(req)
	if err != nil {
		return nil, err
	}
	x := startExtraction(fs.final, func(ctx context.Context, r io.Reader) error { return extractOne(ctx, fs.f, r) })
	return &sparseSink{FileSink: fs, extraction: x}, nil
}

// Writer returns the extraction's input.
func (s *sparseSink) Writer() io.Writer { return s.extraction.Writer() }

// Finish ends the archive, waits for the file to be written and puts it
// in place (see FileSink.Finish).
func (s *sparseSink) Finish() error {
	if err := s.wait(); err != nil {
		s.FileSink.Abort(0)
		return fmt.Errorf("write %s: %w", s.final, err)
	}
	return s.FileSink.Finish()
}

// Abort stops the extraction and removes the partial file: its data did
// not arrive in order, so it is no prefix to resume from.
func (s *sparseSink) Abort(int64) {
	s.stop()
	s.FileSink.Abort(0)
}

// extractOne writes the data of the one regular entry of the tar archive
// read from r into f, a new empty file, treating the archive as hostile
// as extract does: holes stay holes (see writeData), and anything but
// exactly one regular (or sparse) entry fails. It stops when ctx ends.
func extractOne(ctx context.Context, f *os.File, r io.Reader) error {
	arrived := &counter{r: r}
	tr := tar.NewReader(arrived)
	h, err := tr.Next()
	if err != nil {
		return fmt.Errorf("read archive: %w", err)
	}
	if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeGNUSparse {
		return fmt.Errorf("archive entry %.64q: type %q, want a regular file", h.Name, h.Typeflag)
	}
	if err := writeData(ctx, f, tr, arrived, make([]byte, copyBuf), 0); err != nil {
		return err
	}
	if _, err := tr.Next(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("read archive: %w", errOr(err, errors.New("more than one entry")))
	}
	return nil
}
