package source

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// input watches the readiness of a reader that is a file descriptor, so
// that the sender sends what it has when the input stalls, and never sits
// in a read(2) into a connection buffer that it could not leave when the
// stream ends: it waits for input with poll(2), checking its context.
// For readers that are not file descriptors every read is sent as it
// comes and reads are simply blocking.
type input struct {
	r     io.Reader
	raw   syscall.RawConn // nil if r is not a file descriptor
	fds   []unix.PollFd
	wait  int // poll timeout in milliseconds for the current probe
	ready bool
	probe func(fd uintptr)
}

// pollSlice is how long one wait for input sleeps before checking whether
// the stream is over.
const pollSlice = 50 * time.Millisecond

func newInput(r io.Reader) *input {
	in := &input{r: r, fds: make([]unix.PollFd, 1)}
	if sc, ok := r.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			in.raw = raw
		}
	}
	in.probe = func(fd uintptr) {
		in.fds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		n, err := unix.Poll(in.fds, in.wait)
		in.ready = err == nil && n > 0
	}
	return in
}

// poll reports whether input is ready within ms milliseconds.
func (in *input) poll(ms int) bool {
	if in.raw == nil {
		return false
	}
	in.wait, in.ready = ms, false
	return in.raw.Control(in.probe) == nil && in.ready
}

// more reports whether more input is ready right now.
func (in *input) more() bool { return in.poll(0) }

// await waits until input is ready (or at its end) or ctx ends. Readers
// that are not file descriptors are always taken to be ready.
func (in *input) await(ctx context.Context) error {
	for in.raw != nil && !in.poll(int(pollSlice.Milliseconds())) {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	return nil
}

// fill reads into p until p is full, the input ends, or nothing more is
// ready to read, so that interactive input is sent as it comes instead of
// waiting for a full chunk.
func (in *input) fill(ctx context.Context, p []byte) (n int, eof bool, err error) {
	if err := in.await(ctx); err != nil {
		return 0, false, err
	}
	for n < len(p) {
		m, err := in.r.Read(p[n:])
		n += m
		switch {
		case err == io.EOF:
			return n, true, nil
		case err != nil:
			return n, false, fmt.Errorf("read: %w", err)
		case n > 0 && !in.more():
			return n, false, nil
		}
	}
	return n, false, nil
}
