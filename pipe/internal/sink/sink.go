// Package sink writes the payloads a receiver takes from its receive
// buffers to the output: a regular file with pwrite(2) on a goroutine of
// its own, any other writer (a pipe, socket or terminal) one write at a
// time.
package sink

import (
	"errors"
	"io"
	"os"
)

// A Sink writes payloads from receive buffers to the output. It may have
// up to Limit() writes in flight; they are retired in the order they were
// started, which is the order their buffers must be re-posted in.
type Sink interface {
	// Start begins writing p, the payload of receive buffer buf.
	Start(buf int, p []byte)
	// Pending returns the writes started and not yet retired.
	Pending() int
	// Limit returns how many writes may be in flight at once.
	Limit() int
	// Oldest returns the oldest write not yet retired; its Done channel
	// is closed when it has finished.
	Oldest() *Write
	// Retire drops the oldest write, which must have finished.
	Retire()
	// End completes the output once the whole stream is written and every
	// write retired: a sparse file gets its full length.
	End() error
	// Close waits for the writes in flight, which may be reading receive
	// buffers, and returns the prefix of the stream that the output holds:
	// the written bytes already retired, and those of the writes not
	// retired that finished without error, in the order they were started,
	// up to the first that did not (a Lag returns what its output took).
	// It leaves the output's offset after that prefix.
	Close(written int64) int64
	// Describe says how the output is written (pipe.Stats.IO).
	Describe() string
}

// Write is one write of a payload from receive buffer Buf: N bytes of it
// written, or Err, once Done is closed.
type Write struct {
	Buf  int
	N    int
	Err  error
	Done chan struct{}
}

// New returns a Sink for w that may have up to credits writes in flight:
// writes queued for a goroutine for a regular file (see fileSink), else
// one write(2) at a time. With sparse, blocks of zeros become holes (see
// fileSink), and w must be a regular file that takes them (see
// CheckSparse).
func New(w io.Writer, credits int, sparse bool) (Sink, error) {
	if f, ok := w.(*os.File); ok {
		fs, err := newFileSink(f, credits, sparse)
		if err == nil {
			return fs, nil
		}
		if sparse {
			return nil, err
		}
	} else if sparse {
		return nil, errNotFile
	}
	return &streamSink{w: w, single: newSingle()}, nil
}

// errNotFile is why a writer that is not an *os.File cannot be sparse.
var errNotFile = errors.New("a sparse output must be a regular file")

// CheckSparse says why w cannot be written sparse, or nil if it can: it
// must be a regular file that fileSink writes (see offset).
func CheckSparse(w io.Writer) error {
	f, ok := w.(*os.File)
	if !ok {
		return errNotFile
	}
	_, _, err := offset(f)
	return err
}

// streamSink writes to a pipe, socket, terminal or any io.Writer, one
// payload at a time, as it is started.
type streamSink struct {
	w io.Writer
	single
}

func (ss *streamSink) Start(buf int, p []byte) {
	n, err := ss.w.Write(p)
	ss.last.Buf, ss.last.N, ss.last.Err, ss.busy = buf, n, err, true
}

// newSingle returns a single whose writes have finished when they start.
func newSingle() single { return single{last: Write{Done: closed()}} }

// closed returns a closed channel: the Done of a write that finished as
// it started.
func closed() chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}

// single is the bookkeeping of a sink whose writes finish as they are
// started: one at a time, the last until it is retired.
type single struct {
	last Write
	busy bool
}

func (s *single) Pending() int {
	if s.busy {
		return 1
	}
	return 0
}

func (s *single) Limit() int { return 1 }

func (s *single) Oldest() *Write { return &s.last }

func (s *single) Retire() { s.busy = false }

func (ss *streamSink) End() error { return nil }

func (ss *streamSink) Close(written int64) int64 {
	if !ss.busy {
		return written
	}
	return written + finished([]*Write{&ss.last})
}

// finished returns the bytes of the writes in ws, which have all finished,
// up to the first that failed.
func finished(ws []*Write) int64 {
	var n int64
	for _, w := range ws {
		if w.Err != nil {
			break
		}
		n += int64(w.N)
	}
	return n
}

func (ss *streamSink) Describe() string { return "write" }
