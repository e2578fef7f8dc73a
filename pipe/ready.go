package pipe

import (
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// moreReady reports whether r, if it is a file descriptor, has input ready
// to read without blocking. Readers that are not file descriptors are
// taken to have nothing more ready, so each of their reads is sent at once.
func moreReady(r io.Reader) bool {
	sc, ok := r.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ready := false
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		ready = err == nil && n > 0
	})
	return ready
}
