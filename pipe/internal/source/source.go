// Package source reads a sender's input into its send buffers: a regular
// file with positional reads in parallel (pread(2), with O_DIRECT where it
// pays), and any other reader (a pipe, socket or terminal) as the input
// comes, sending what has come when it stalls.
package source

import (
	"context"
	"io"
	"os"
)

// Buffers are the send buffers a Source fills.
type Buffers struct {
	// Free holds the indices of the buffers free to be filled. A Source
	// takes them from it, and on Close gives back those it holds.
	Free chan int
	// Bufs are the send buffers, at least Chunk bytes each.
	Bufs [][]byte
	// Chunk is how many bytes of input a buffer carries.
	Chunk int
}

// Take waits for a free send buffer.
func (b Buffers) Take(ctx context.Context) (int, error) {
	select {
	case i := <-b.Free:
		return i, nil
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

// A Source fills free send buffers with the input, in order.
type Source interface {
	// Next fills a free send buffer with the next piece of input and
	// returns the buffer's index and how many bytes it holds; n == 0 with
	// eof means the input ended (the buffer then carries the end of the
	// stream). A read error comes with the bytes read before it.
	Next(ctx context.Context) (buf, n int, eof bool, err error)
	// Close waits for reads still in flight, which may be writing into
	// send buffers, gives back the buffers it holds, and leaves a file's
	// offset after the sent bytes of it, as a sequential reader leaves it.
	Close(sent int64)
	// Describe says how the input is read (pipe.Stats.IO).
	Describe() string
	// Serial reports whether Next reads each piece itself, on its
	// caller's goroutine, one after the other (a pipe), rather than on
	// goroutines of its own, ahead of the caller (a file).
	Serial() bool
}

// New returns a Source of r into b: parallel positional reads for a
// regular file (see fileSource), else reads as the input comes.
func New(r io.Reader, b Buffers) Source {
	if f, ok := r.(*os.File); ok {
		if fs := newFileSource(f, b); fs != nil {
			return fs
		}
	}
	return &streamSource{b: b, in: newInput(r)}
}

// streamSource reads a pipe, socket, terminal or any io.Reader into one
// buffer at a time, sending what has come when the input stalls.
type streamSource struct {
	b  Buffers
	in *input
}

func (ss *streamSource) Next(ctx context.Context) (int, int, bool, error) {
	i, err := ss.b.Take(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	n, eof, err := ss.in.fill(ctx, ss.b.Bufs[i][:ss.b.Chunk])
	return i, n, eof, err
}

func (ss *streamSource) Close(int64) {}

func (ss *streamSource) Describe() string { return "read" }

func (ss *streamSource) Serial() bool { return true }
