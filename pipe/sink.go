package pipe

import (
	"io"
	"os"
)

// sink writes payloads from receive buffers to the output. A sink may have
// up to limit() writes in flight; they are retired in the order they were
// started, which is the order their buffers must be re-posted in.
type sink interface {
	// start begins writing p, the payload of receive buffer buf.
	start(buf int, p []byte)
	// pending returns the writes started and not yet retired.
	pending() int
	// limit returns how many writes may be in flight at once.
	limit() int
	// oldest returns the oldest write not yet retired; its done channel
	// is closed when it has finished.
	oldest() *outWrite
	// retire drops the oldest write, which must have finished.
	retire()
	// close waits for the writes in flight, which may be reading receive
	// buffers, and leaves the output's offset after written bytes.
	close(written int64)
	// describe says how the output is written (Stats.IO).
	describe() string
}

// outWrite is one write of a payload from receive buffer buf.
type outWrite struct {
	buf  int
	n    int
	err  error
	done chan struct{}
}

// newSink returns a sink for w: parallel positional writes for a regular
// file (see fileSink), else one write(2) at a time.
func newSink(w io.Writer, credits int) sink {
	if f, ok := w.(*os.File); ok {
		if fs := newFileSink(f, credits); fs != nil {
			return fs
		}
	}
	done := make(chan struct{})
	close(done) // its writes have finished when start returns
	return &streamSink{w: w, last: outWrite{done: done}}
}

// streamSink writes to a pipe, socket, terminal or any io.Writer, one
// payload at a time, as it is started.
type streamSink struct {
	w    io.Writer
	last outWrite
	busy bool
}

func (ss *streamSink) start(buf int, p []byte) {
	n, err := ss.w.Write(p)
	ss.last.buf, ss.last.n, ss.last.err, ss.busy = buf, n, err, true
}

func (ss *streamSink) pending() int {
	if ss.busy {
		return 1
	}
	return 0
}

func (ss *streamSink) limit() int { return 1 }

func (ss *streamSink) oldest() *outWrite { return &ss.last }

func (ss *streamSink) retire() { ss.busy = false }

func (ss *streamSink) close(int64) {}

func (ss *streamSink) describe() string { return "write" }
