package sendrecv

import (
	"os"

	"golang.org/x/sys/unix"
)

// growPipe enlarges the kernel buffer of f, if f is a pipe, towards size
// bytes (the kernel caps it at /proc/sys/fs/pipe-max-size, 1 MiB by
// default), so that a chunk moves through stdin or stdout in one or a few
// system calls instead of sixteen 64 KiB ones. It is best effort: a pipe
// keeps its size when the kernel refuses, and a pipe already larger is
// never shrunk.
func growPipe(f *os.File, size int) {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		cur, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
		if err != nil {
			return
		}
		for s := size; s > cur; s /= 2 {
			if _, err := unix.FcntlInt(fd, unix.F_SETPIPE_SZ, s); err == nil {
				return
			}
		}
	})
}
