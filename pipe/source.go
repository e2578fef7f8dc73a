package pipe

import (
	"context"
	"io"
	"os"
)

// source fills the sender's free send buffers with the input, in order.
type source interface {
	// next fills a free send buffer with the next piece of input and
	// returns the buffer's index and how many bytes it holds; n == 0 with
	// eof means the input ended (the buffer then carries the end of the
	// stream). A read error comes with the bytes read before it.
	next(ctx context.Context) (buf, n int, eof bool, err error)
	// close waits for reads still in flight, which may be writing into
	// send buffers, and gives back what the source holds.
	close()
	// describe says how the input is read (Stats.IO).
	describe() string
}

// newSource returns a source for r: parallel positional reads for a
// regular file (see fileSource), else reads as the input comes.
func (s *sender) newSource(r io.Reader) source {
	if f, ok := r.(*os.File); ok {
		if fs := newFileSource(s, f); fs != nil {
			return fs
		}
	}
	return &streamSource{s: s, in: newInput(r)}
}

// streamSource reads a pipe, socket, terminal or any io.Reader into one
// buffer at a time, sending what has come when the input stalls.
type streamSource struct {
	s  *sender
	in *input
}

func (ss *streamSource) next(ctx context.Context) (int, int, bool, error) {
	i, err := ss.s.freeBuf(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	n, eof, err := ss.in.fill(ctx, ss.s.c.SendBuf(i)[:ss.s.chunk])
	return i, n, eof, err
}

func (ss *streamSource) close() {}

func (ss *streamSource) describe() string { return "read" }
