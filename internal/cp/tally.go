package cp

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/progress"
	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// tally counts a copy for its progress line (--progress): the totals, the
// archive's entries that passed (as the walk hands them to the archive,
// or as the extraction writes them) and their files' bytes. A nil tally
// counts nothing.
type tally struct {
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

// newTally returns the progress line of a copy of files entries holding
// bytes in their files, on o.Stderr, or nil without o.Progress.
func (o Options) newTally(files, bytes int64) *tally {
	if !o.Progress {
		return nil
	}
	return newTallyOn(o.Stderr, !o.Redraw, files, bytes)
}

// newTallyOn is newTally on w, a line each time if lines.
func newTallyOn(w io.Writer, lines bool, files, bytes int64) *tally {
	t := &tally{files: files, bytes: bytes}
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
func (t *tally) counts() string {
	return fmt.Sprintf("(xfr#%d, to-chk=%d/%d)", t.xfr.Load(), max(t.files-t.done.Load(), 0), t.files)
}

// add counts n bytes of a file's data passing.
func (t *tally) add(n int64) {
	if t != nil {
		t.m.Set(t.n.Add(n))
	}
}

// set counts the bytes of a stream of one file: n so far.
func (t *tally) set(n int64) {
	if t != nil {
		t.n.Store(n)
		t.m.Set(n)
	}
}

// entry counts an entry of type typ passing, a file if it is one.
func (t *tally) entry(typ byte) {
	if t == nil {
		return
	}
	t.done.Add(1)
	if typ == tar.TypeReg || typ == tar.TypeGNUSparse {
		t.xfr.Add(1)
	}
	t.m.Set(t.n.Load())
}

// restart counts from nothing again: an attempt to stream starts over.
func (t *tally) restart() {
	if t != nil {
		t.done.Store(0)
		t.xfr.Store(0)
		t.n.Store(0)
	}
}

// end draws the final line of a copy that ended with err: after a
// failure, only if a line was drawn.
func (t *tally) end(err error) {
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
func (t *tally) reader(r io.Reader) io.Reader {
	if t == nil {
		return struct{ io.Reader }{r}
	}
	return tallyReader{r, t}
}

// tallyReader counts what is read through it in its tally.
type tallyReader struct {
	r io.Reader
	t *tally
}

func (r tallyReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.t.add(int64(n))
	return n, err
}

// countTree counts what an archive of srcs that keeps what keep says
// holds (the totals of its progress line): its entries and their files'
// bytes, a file hard-linked in it once with -H. Entries it cannot read are
// left out: the archive's own walk fails on them.
func countTree(srcs []source, keep meta.Flags) (files, bytes int64) {
	seen := map[[2]uint64]bool{}
	for _, s := range srcs {
		_ = walkSource(s, func(p, _ string, d fs.DirEntry, err error) error {
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

// endFile is end for a stream of one file, which passed if it did not
// fail.
func (t *tally) endFile(err error) {
	if err == nil {
		t.entry(tar.TypeReg)
	}
	t.end(err)
}

// planTally returns the progress line of the copy that p plans, or nil
// without o.Progress: a tree is counted first (see countTree).
func (o Options) planTally(p plan) *tally {
	switch {
	case !o.Progress:
		return nil
	case p.mode == modeFile:
		return o.newTally(1, p.srcs[0].info.Size())
	}
	return o.newTally(countTree(p.srcs, o.Keep))
}

// fetchTally returns the progress line of a download into s, whose plan
// is c, or nil without o.Progress: a tree's totals are the remote side's
// "total" line, which r reads.
func (o Options) fetchTally(ctx context.Context, r *remote, s sink, c Contents, host string) (*tally, error) {
	if !o.Progress {
		return nil, nil
	}
	ts, ok := s.(*tarSink)
	if !ok {
		return o.newTally(1, c.Size), nil
	}
	st, err := r.next(ctx, offerWait)
	switch {
	case err != nil:
		return nil, conn.Errorf(conn.KindSetup, "read the totals from "+host, "%v", err)
	case st.kind == "fail":
		return nil, remoteFailed(host, st)
	case st.kind != "total":
		return nil, conn.Errorf(conn.KindSetup, "read the totals from "+host, "expected them, got %q", st.kind)
	}
	ts.tally = o.newTally(st.files, st.n)
	return ts.tally, nil
}

// streamShown is stream with the progress line of p, if o asks for one.
func streamShown(ctx context.Context, addr string, p plan, in *os.File, o Options, cfg pipe.SendConfig, gone <-chan struct{}) (pipe.Stats, error) {
	p.tally = o.planTally(p)
	if p.tally != nil && p.mode == modeFile {
		cfg.Progress = p.tally.set
	}
	st, err := stream(ctx, addr, p, in, o, cfg, gone)
	if p.mode == modeFile {
		p.tally.endFile(err)
	} else {
		p.tally.end(err)
	}
	return st, err
}

// fetchShown is fetchStream with the progress line of a download into s,
// whose plan is c, if o asks for one (see fetchTally).
func (o Options) fetchShown(ctx context.Context, r *remote, srv server.Server, s sink, c Contents, host, dst string) (pipe.Stats, error) {
	tl, err := o.fetchTally(ctx, r, s, c, host)
	if err != nil {
		s.Abort(0)
		return pipe.Stats{}, err
	}
	_, tree := s.(*tarSink)
	if tl != nil && !tree {
		srv.Config.Progress = tl.set
	}
	st, err := fetchStream(ctx, r, srv, s, host, dst)
	if tree {
		tl.end(err)
	} else {
		tl.endFile(err)
	}
	return st, err
}
