package pipe

import (
	"io"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What vmsplice(2) would save the receiver when stdout is a pipe, for the
// docs/performance.md's note on why it stays off: go test -run '^$' -bench Egress ./pipe.
// The reader drains the pipe with read(2), as `wc -c` or `cat` do.
func BenchmarkEgress(b *testing.B) {
	const chunk = 1 << 20
	buf, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(buf)
	for i := range buf {
		buf[i] = byte(i)
	}
	b.Run("write", func(b *testing.B) {
		benchEgress(b, buf, func(fd int, p []byte) (int, error) { return unix.Write(fd, p) })
	})
	b.Run("vmsplice", func(b *testing.B) {
		benchEgress(b, buf, func(fd int, p []byte) (int, error) {
			iov := []unix.Iovec{{Base: (*byte)(unsafe.Pointer(&p[0]))}}
			iov[0].SetLen(len(p))
			return unix.Vmsplice(fd, iov, 0)
		})
	})
}

func benchEgress(b *testing.B, buf []byte, put func(fd int, p []byte) (int, error)) {
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	_, _ = unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, len(buf))
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(io.Discard, struct{ io.Reader }{r})
	}()
	fd := int(w.Fd())
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		for p := buf; len(p) > 0; {
			n, err := put(fd, p)
			if err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
	}
	w.Close()
	<-drained
}
