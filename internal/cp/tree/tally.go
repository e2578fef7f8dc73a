package tree

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/progress"
)

// Tally counts a copy for its progress line (--progress): the totals, the
// archive's entries that passed (as the walk hands them to the archive,
// or as the extraction writes them) and their files' bytes. A nil tally
// counts nothing.
type Tally struct {
	m            *progress.Meter
	files, bytes int64 // the totals
	done, xfr    atomic.Int64
	n            atomic.Int64 // files' bytes so far
}

// Progress lines: on a terminal, redrawn in place every tallyEvery; else
// (--progress given) a line every tallyLinesEvery.
const (
	tallyEvery      = 200 * time.Millisecond
	tallyLinesEvery = time.Second
)

// NewTally returns the progress line of a copy of files entries holding
// bytes in their files, on w: a line each time if lines, else redrawn in
// place.
func NewTally(w io.Writer, lines bool, files, bytes int64) *Tally {
	t := &Tally{files: files, bytes: bytes}
	every := tallyEvery
	if lines {
		every = tallyLinesEvery
	}
	t.m = progress.New(progress.Config{W: w, Size: bytes, Tail: t.counts, Every: every, Lines: lines})
	return t
}

// counts ends the progress line as rsync's --info=progress2 does (the
// bar before them has the bytes, the percentage of the total, the rate,
// the time taken and the time left): the files sent and how many entries
// are left of the total.
func (t *Tally) counts() string {
	return fmt.Sprintf("(xfr#%d, to-chk=%d/%d)", t.xfr.Load(), max(t.files-t.done.Load(), 0), t.files)
}

// add counts n bytes of a file's data passing.
func (t *Tally) add(n int64) {
	if t != nil {
		t.m.Set(t.n.Add(n))
	}
}

// Set counts the bytes of a stream of one file: n so far.
func (t *Tally) Set(n int64) {
	if t != nil {
		t.n.Store(n)
		t.m.Set(n)
	}
}

// entry counts an entry of type typ passing, a file if it is one.
func (t *Tally) entry(typ byte) {
	if t == nil {
		return
	}
	t.done.Add(1)
	if typ == tar.TypeReg || typ == tar.TypeGNUSparse {
		t.xfr.Add(1)
	}
	t.m.Set(t.n.Load())
}

// Restart counts from nothing again: an attempt to stream starts over.
func (t *Tally) Restart() {
	if t != nil {
		t.done.Store(0)
		t.xfr.Store(0)
		t.n.Store(0)
	}
}

// End draws the final line of a copy that ended with err: after a
// failure, only if a line was drawn.
func (t *Tally) End(err error) {
	switch {
	case t == nil:
	case err == nil:
		t.m.End(t.n.Load())
	default:
		t.m.Stop()
	}
}

// reader returns r, through which a file's data passes, counting it; as
// an io.Reader alone, so that io.CopyBuffer uses its buffer.
func (t *Tally) reader(r io.Reader) io.Reader {
	if t == nil {
		return struct{ io.Reader }{r}
	}
	return tallyReader{r, t}
}

// tallyReader counts what is read through it in its tally.
type tallyReader struct {
	r io.Reader
	t *Tally
}

func (r tallyReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.t.add(int64(n))
	return n, err
}

// CountTree counts what an archive of srcs that keeps what keep says
// holds (the totals of its progress line): its entries and their files'
// bytes, a file hard-linked in it once with -H. Entries it cannot read are
// left out: the archive's own walk fails on them.
func CountTree(srcs []Source, keep meta.Flags) (files, bytes int64) {
	seen := map[[2]uint64]bool{}
	for _, s := range srcs {
		_ = walkSource(s, false, func(p, _ string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := d.Info()
			if err != nil || !archived(fi, keep) {
				return nil
			}
			files++
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && keep.Links && fi.Mode().IsRegular() && st.Nlink > 1 {
				id := [2]uint64{uint64(st.Dev), st.Ino}
				if seen[id] {
					return nil
				}
				seen[id] = true
			}
			if fi.Mode().IsRegular() {
				bytes += fi.Size()
			}
			return nil
		})
	}
	return files, bytes
}

// EndFile is end for a stream of one file, which passed if it did not
// fail.
func (t *Tally) EndFile(err error) {
	if err == nil {
		t.entry(tar.TypeReg)
	}
	t.End(err)
}
