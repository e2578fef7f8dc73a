package pipe

import (
	"context"
	"io"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkEnds measures what each side spends on its end of a stream
// beside BenchmarkCeiling's rows (bench/needs.sh makes a table of the two:
// what a host needs at line rate), unkeyed, GB/cpu-s the figure that
// matters:
//
//	go test -run '^$' -bench Ends ./pipe
//
// sender/pipe: Send reading a pipe that `cat` fills from a file in
// /dev/shm, as `cat file | rdmasend` does (cat's CPU is not counted).
// receiver/file: Receive into a new file in the test's directory, with
// O_DIRECT where its file system takes it (else through the page cache);
// receiver/file-cached: the same file written at an unaligned offset, so
// through the page cache (its write-back, by the kernel's threads, is not
// counted); receiver/pipe: Receive into a pipe that `cat` drains into
// /dev/null.
func BenchmarkEnds(b *testing.B) {
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		b.Skip("no /dev/shm for the input file")
	}
	path := ceilFile(b)
	unkeyed := ceilModes[0]
	b.Run("sender/pipe", func(b *testing.B) { benchSenderPipe(b, path) })
	b.Run("receiver/file", func(b *testing.B) { benchReceiverFile(b, 0) })
	b.Run("receiver/file-cached", func(b *testing.B) { benchReceiverFile(b, 1) })
	b.Run("receiver/pipe", func(b *testing.B) {
		w := drained(b)
		benchReceiverTo(b, unkeyed, w, func() error { return nil }, "write")
	})
}

// benchSenderPipe measures Send, unkeyed, from a pipe that `cat` fills
// with the file at path, a new cat for each stream.
func benchSenderPipe(b *testing.B, path string) {
	c := newFakeReceiver(b, ceilModes[0])
	c.short = true
	defer c.Close()
	cfg := ceilModes[0].sendConfig()
	b.SetBytes(ceilStream)
	cpu := cpuTime(b)
	for b.Loop() {
		if err := c.reset(); err != nil {
			b.Fatal(err)
		}
		cat := exec.Command("cat", path)
		r, err := cat.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cat.Start(); err != nil {
			b.Fatal(err)
		}
		st, err := Send(context.Background(), c, r, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := cat.Wait(); err != nil {
			b.Fatal(err)
		}
		if st.Bytes != ceilStream || st.IO != "read" {
			b.Fatalf("sent %d bytes by %q, want %d by read", st.Bytes, st.IO, ceilStream)
		}
	}
	reportCPU(b, cpuTime(b)-cpu, ceilStream)
}

// benchReceiverFile measures Receive, unkeyed, into a file in the test's
// directory, each stream written from offset off after the file is
// emptied: with O_DIRECT at 0 where the file system takes it, through
// the page cache at 1.
func benchReceiverFile(b *testing.B, off int64) {
	f, err := os.CreateTemp(b.TempDir(), "out")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	want := "pwrite"
	if fd, err := unix.Open(f.Name(), unix.O_WRONLY|unix.O_DIRECT, 0); err == nil && off == 0 {
		unix.Close(fd)
		want = "pwrite O_DIRECT"
	}
	rewind := func() error {
		if err := f.Truncate(0); err != nil {
			return err
		}
		_, err := f.Seek(off, io.SeekStart)
		return err
	}
	benchReceiverTo(b, ceilModes[0], f, rewind, want)
}

// drained returns the writing end of a pipe that `cat` drains into
// /dev/null until b ends.
func drained(b *testing.B) io.Writer {
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cat := exec.Command("cat")
	cat.Stdin = r
	if err := cat.Start(); err != nil {
		b.Fatal(err)
	}
	r.Close()
	b.Cleanup(func() {
		w.Close()
		cat.Wait()
	})
	return w
}
