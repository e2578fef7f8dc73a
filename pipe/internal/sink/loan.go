package sink

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// loan is a payload a Lag writes to its pipe straight from its receive
// buffer, without a copy, while the output keeps up: its write finishes
// once the pipe took it all, or once Hurry copied what the pipe had not
// taken. The drainer writes it on the Lag's twin, whose writes wait in
// Go's poller and end at a deadline, so that Hurry can stop one: no write
// is ever in progress from a receive buffer that its write has given back.
type loan struct {
	w   *Write
	p   []byte
	off int // bytes the pipe took
}

// nonBlockingTwin opens w again, where it is a pipe, as a file of its own
// that does not block (O_NONBLOCK is the open file's, not the pipe's, so w
// keeps blocking) and takes write deadlines, or returns nil. It asks for a
// pipe of pipeSize bytes, where the pipe is smaller, so that the pipe
// takes a payload in fewer writes.
func nonBlockingTwin(w io.Writer) *os.File {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return nil
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	if size, err := unix.FcntlInt(uintptr(fd), unix.F_GETPIPE_SZ, 0); err == nil && size < pipeSize {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, pipeSize) // as big as an unprivileged process may ask by default
	}
	twin := os.NewFile(uintptr(fd), f.Name()) // non-blocking: in Go's poller
	if twin.SetWriteDeadline(time.Time{}) != nil {
		twin.Close()
		return nil
	}
	return twin
}

// pipeSize is the pipe capacity a Lag asks for: /proc/sys/fs/pipe-max-size's
// default.
const pipeSize = 1 << 20

// lendLocked makes a loan of p, the payload of receive buffer buf, where
// the Lag makes loans, and says whether it did. A loan is written after
// the backlog and the older loans.
func (l *Lag) lendLocked(buf int, p []byte) bool {
	if l.twin == nil || l.err != nil || l.closing || len(l.loans) >= l.cfg.Loans {
		return false
	}
	ln := &loan{w: &Write{Buf: buf, Done: make(chan struct{})}, p: p}
	l.loans = append(l.loans, ln)
	l.writes = append(l.writes, ln.w)
	l.changedLocked()
	return true
}

// repayLocked writes the oldest loan to the pipe, without the lock, and
// finishes it once the pipe took it all; a write that Hurry or Close
// stopped (see recallLocked) leaves the loan to them.
func (l *Lag) repayLocked() {
	ln := l.loans[0]
	l.writing = true
	l.mu.Unlock()
	n, err := l.twin.Write(ln.p[ln.off:])
	l.mu.Lock()
	l.writing = false
	ln.off += n
	l.taken += int64(n)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && l.recalling:
	case err != nil:
		l.err = fmt.Errorf("write %s: %w", l.twin.Name(), err)
		l.failLoansLocked(l.err)
	default:
		l.loans[0] = nil
		l.loans = l.loans[1:]
		ln.w.N = len(ln.p)
		close(ln.w.Done)
	}
	l.changedLocked()
}

// recallLocked stops the drainer's write from a loan, if one is in
// progress, and keeps it from starting another until Hurry or Close
// clears recalling.
func (l *Lag) recallLocked() error {
	l.recalling = true
	_ = l.twin.SetWriteDeadline(time.Unix(1, 0))
	for l.writing {
		if err := l.wait(); err != nil {
			return err
		}
	}
	return nil
}

// Hurry gives the oldest loan's receive buffer back: the receiver waits
// for it. Unless the pipe takes it within the grace (see graceFor; none
// where the backlog holds older bytes, which the pipe takes first), Hurry
// copies what the pipe has not taken of it into the backlog; the later
// loans go on.
func (l *Lag) Hurry() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.loans) == 0 {
		return
	}
	ln := l.loans[0]
	if l.b.held == 0 && l.graceLocked(l.graceFor(len(ln.p)-ln.off)) {
		return
	}
	err := l.recallLocked()
	defer func() {
		l.recalling = false
		_ = l.twin.SetWriteDeadline(time.Time{})
		l.changedLocked()
	}()
	if len(l.loans) == 0 || l.loans[0] != ln {
		return // the pipe took it meanwhile
	}
	if err != nil {
		l.failLoansLocked(err)
		return
	}
	l.loans[0] = nil
	l.loans = l.loans[1:]
	n, err := 0, l.err
	if err == nil {
		n, err = l.putLocked(ln.p[ln.off:]) // the drainer repays no later loan meanwhile
	}
	ln.w.N, ln.w.Err = ln.off+n, err
	close(ln.w.Done)
}

// graceFor is how long Hurry waits for the pipe to take the n bytes left
// of a loan: LagConfig.Grace if set, else as long as copying them would
// take, at the rate of the copies so far (copyRate before the first). So
// the chain waits for the output at most twice what a copy costs it, and
// nothing is copied that the pipe takes as soon.
func (l *Lag) graceFor(n int) time.Duration {
	if l.cfg.Grace > 0 {
		return l.cfg.Grace
	}
	if l.copyBytes == 0 {
		return time.Duration(int64(n) * int64(time.Second) / copyRate)
	}
	return time.Duration(int64(n) * int64(l.copyTime) / l.copyBytes)
}

// copyRate is the rate, in bytes a second, that graceFor assumes of a
// copy before the lag made one: memcpy's on a modest core.
const copyRate = 4 << 30

// graceLocked waits up to grace, without the lock, for the pipe to take
// the oldest loan, and says whether it did.
func (l *Lag) graceLocked(grace time.Duration) bool {
	done := l.loans[0].w.Done
	t := time.NewTimer(grace)
	defer t.Stop()
	l.mu.Unlock()
	defer l.mu.Lock()
	select {
	case <-done:
		return true
	case <-t.C:
	case <-l.ctx.Done():
	}
	return false
}

// failLoansLocked finishes every loan with err.
func (l *Lag) failLoansLocked(err error) {
	for _, ln := range l.loans {
		ln.w.N, ln.w.Err = ln.off, err
		close(ln.w.Done)
	}
	l.loans = nil
}
