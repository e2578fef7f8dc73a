package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// LagConfig says how much a Lag may hold of what its output has not
// taken yet.
type LagConfig struct {
	Memory int64  // bytes in memory at most (at least three blocks of 256 KiB are used)
	Spill  int64  // bytes in a spill file beyond those; 0: none
	Dir    string // the spill file's directory; "": a private one in os.TempDir
	Block  int    // the largest payload (the stream's chunk); blocks are no larger
	// Leave fails a write that finds memory and spill full with ErrBehind;
	// else it waits for the output.
	Leave bool
	// Held, if set, is told the bytes held after each change.
	Held func(int64)
	// Loans is how many payloads a Lag in front of a pipe may write
	// straight from their receive buffers at once, each after what the
	// backlog holds (see Lag.Hurry); 0: every payload is copied.
	Loans int
	// Grace is how long Hurry waits for the pipe before it copies; 0: as
	// long as the copy would take (see Lag.graceFor).
	Grace time.Duration
}

// ErrBehind is a Lag's failure to take a payload with LagConfig.Leave: the
// output fell further behind the stream than memory and spill hold.
var ErrBehind = errors.New("the output fell behind the stream by more than the lag buffer and the spill hold")

// Lag writes payloads to a pipe or any other writer on a goroutine of its
// own, from copies it keeps in memory and beyond that in a spill file, so
// that a slow output does not hold back the receive buffers: each write
// finishes once copied. While the output keeps up, a pipe is written
// straight from the receive buffers instead (see loan). End waits until
// the output took it all.
type Lag struct {
	ctx     context.Context
	w       io.Writer
	cfg     LagConfig
	mu      sync.Mutex
	b       backlog
	changed chan struct{} // closed and replaced on every change
	err     error         // the output's or the spill's failure
	taken   int64         // bytes the output took
	peak    int64         // the most held at once
	closing bool          // the drainer is to stop
	done    chan struct{} // closed when the drainer has stopped
	// twin is the output pipe opened again without blocking, for loans;
	// nil: none are made.
	twin    *os.File
	loans   []*loan // oldest first, all newer than the backlog
	writing bool    // the drainer is in a write from the oldest loan
	// recalling keeps the drainer from writing from a loan while Hurry
	// or Close takes the loans back.
	recalling bool
	writes    []*Write      // started and not retired, oldest first
	copied    chan struct{} // closed: the Done of a copied payload's write
	// copyBytes and copyTime are what the backlog took in, and how long
	// its copies took (not the waits for room).
	copyBytes int64
	copyTime  time.Duration
}

// lagBlock is the most a Lag copies at once, and the size of its blocks:
// small enough that the drainer writes one from the cache while the next
// is copied.
const lagBlock = 256 << 10

// NewLag returns a Lag in front of w; ctx ends its waits for room or for
// the output.
func NewLag(ctx context.Context, w io.Writer, cfg LagConfig) *Lag {
	block := min(lagBlock, max(cfg.Block, 1))
	blocks := max(2, int(cfg.Memory/int64(block))-1) // and one to read the spill back into
	l := &Lag{ctx: ctx, w: w, cfg: cfg, changed: make(chan struct{}), done: make(chan struct{}), copied: closed()}
	l.b = backlog{block: block, maxBlocks: blocks, spillSize: cfg.Spill, open: func() (spillFile, error) { return openSpill(cfg.Dir) }}
	if cfg.Loans > 0 {
		l.twin = nonBlockingTwin(w)
	}
	go l.drain()
	return l
}

// WithLag returns s, or a Lag in front of w where s writes w one payload
// at a time (w is not a regular file).
func WithLag(ctx context.Context, s Sink, w io.Writer, cfg LagConfig) Sink {
	if _, ok := s.(*streamSink); !ok {
		return s
	}
	return NewLag(ctx, w, cfg)
}

// openSpill makes an unlinked file in dir, or in a private directory of
// its own: it is gone once closed, however the process ends.
func openSpill(dir string) (*os.File, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "rdmarecv-spill-")
		if err != nil {
			return nil, err
		}
		defer os.Remove(d)
		dir = d
	}
	f, err := os.CreateTemp(dir, ".rdmarecv-spill-")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (l *Lag) Start(buf int, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lendLocked(buf, p) {
		return
	}
	n, err := l.putLocked(p)
	l.writes = append(l.writes, &Write{Buf: buf, N: n, Err: err, Done: l.copied})
}

// Pending returns the writes started and not retired.
func (l *Lag) Pending() int { return len(l.writes) }

// Limit is one, or LagConfig.Loans where loans are made.
func (l *Lag) Limit() int {
	if l.twin == nil {
		return 1
	}
	return l.cfg.Loans
}

// Oldest returns the oldest write not retired.
func (l *Lag) Oldest() *Write { return l.writes[0] }

// Retire drops the oldest write.
func (l *Lag) Retire() {
	l.writes[0] = nil
	l.writes = l.writes[1:]
}

// putLocked copies p into the backlog, a block at a time, so that the
// drainer writes a block while the next is copied, both in the cache, and
// times the copies (see graceFor); it waits for room unless
// LagConfig.Leave.
func (l *Lag) putLocked(p []byte) (int, error) {
	n := 0
	for l.err == nil && n < len(p) {
		start := time.Now()
		m, err := l.b.add(p[n:min(len(p), n+l.b.block)])
		n += m
		l.copyBytes, l.copyTime = l.copyBytes+int64(m), l.copyTime+time.Since(start)
		switch {
		case err != nil:
			l.err = err
		case m > 0:
			l.changedLocked()
			l.mu.Unlock() // for the drainer
			l.mu.Lock()
		case l.cfg.Leave:
			return n, fmt.Errorf("%w (%d bytes behind, %d of them spilled; the output took %d)", ErrBehind, l.b.held, l.b.end-l.b.start, l.taken)
		default:
			if err := l.wait(); err != nil {
				return n, err
			}
		}
	}
	if n == len(p) {
		return n, nil
	}
	return n, l.err
}

// changedLocked records a change and wakes those who wait for one.
func (l *Lag) changedLocked() {
	l.peak = max(l.peak, l.b.held)
	if l.cfg.Held != nil {
		l.cfg.Held(l.b.held)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait waits, without the lock, for a change or the end of ctx.
func (l *Lag) wait() error {
	ch := l.changed
	l.mu.Unlock()
	defer l.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-l.ctx.Done():
		return context.Cause(l.ctx)
	}
}

// drain writes what the backlog holds to the output, oldest first, until
// closing or a failure.
func (l *Lag) drain() {
	defer close(l.done)
	var scratch []byte
	l.mu.Lock()
	defer l.mu.Unlock()
	defer func() {
		if f, ok := l.b.spill.(io.Closer); ok {
			f.Close()
		}
		if l.twin != nil {
			l.twin.Close()
		}
	}()
	for !l.closing && l.err == nil {
		t := l.b.take()
		if t == nil && len(l.loans) > 0 && !l.recalling {
			l.repayLocked()
			continue
		}
		if t == nil {
			ch := l.changed
			l.mu.Unlock()
			<-ch
			l.mu.Lock()
			continue
		}
		if t.buf == nil && scratch == nil {
			scratch = make([]byte, l.b.block)
		}
		l.mu.Unlock()
		p, err := l.b.read(t, scratch)
		n := 0
		if err == nil {
			n, err = l.w.Write(p)
		}
		l.mu.Lock()
		l.taken += int64(n)
		if err != nil {
			l.err = err
		} else {
			l.b.release(t)
		}
		l.changedLocked()
	}
}

// End waits until the output took every byte held.
func (l *Lag) End() error {
	l.mu.Lock()
	for (l.b.held > 0 || len(l.loans) > 0) && l.err == nil {
		if err := l.wait(); err != nil {
			l.mu.Unlock()
			return err
		}
	}
	err := l.err
	l.closing = true
	l.changedLocked()
	l.mu.Unlock()
	<-l.done
	return err
}

// Close stops the output after the write in progress, without waiting for
// it (it is from the Lag's own memory), and returns the bytes the output
// took: the prefix of the stream that it holds, or, for a write still in
// progress, the start of it.
func (l *Lag) Close(int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	l.changedLocked()
	if l.twin != nil {
		l.recalling = true
		_ = l.twin.SetWriteDeadline(time.Unix(1, 0)) // a write in progress ends now
		for l.writing {
			ch := l.changed
			l.mu.Unlock()
			<-ch
			l.mu.Lock()
		}
	}
	l.failLoansLocked(context.Canceled)
	return l.taken
}

// Backlog returns the bytes held now, the most held at once, and the bytes
// that went through the spill.
func (l *Lag) Backlog() (held, peak, spilled int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.held, l.peak, l.b.spilled
}

// Describe says how the output is written: as a streamSink, from a lag.
func (l *Lag) Describe() string { return "write, lagging" }
