package pipe

import (
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// readyCheck returns a function that reports whether r has input ready to
// read without blocking, when r is a file descriptor. Readers that are not
// file descriptors are taken to have nothing more ready, so each of their
// reads is sent at once. The check allocates nothing per call.
func readyCheck(r io.Reader) func() bool {
	sc, ok := r.(syscall.Conn)
	if !ok {
		return func() bool { return false }
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return func() bool { return false }
	}
	fds := make([]unix.PollFd, 1)
	ready := false
	probe := func(fd uintptr) {
		fds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		n, err := unix.Poll(fds, 0)
		ready = err == nil && n > 0
	}
	return func() bool {
		ready = false
		return raw.Control(probe) == nil && ready
	}
}
