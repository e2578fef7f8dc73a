package pipe

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
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
// /dev/null; relay/*: Receive into /dev/null relaying to a fakeReceiver
// (see benchRelay), zero-copy as over RDMA unkeyed and keyed, copied as
// over TCP (relay/copy, unkeyed), and encrypted (decrypted in place, so
// copied, over any transport).
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
	b.Run("relay/unkeyed", func(b *testing.B) { benchRelay(b, unkeyed, true) })
	b.Run("relay/keyed", func(b *testing.B) { benchRelay(b, ceilModes[1], true) })
	b.Run("relay/copy", func(b *testing.B) { benchRelay(b, unkeyed, false) })
	b.Run("relay/encrypted", func(b *testing.B) { benchRelay(b, ceilModes[2], false) })
}

// benchRelay measures Receive in mode m from a fakeSender into /dev/null,
// relaying the stream (RelayConfig.To) to a fakeNext: straight from the
// receive buffers if forward, else copied into the relay's send buffers.
// The fakeNext's CPU, a trailer parsed per message, is counted with the
// relay's, as a fakeReceiver's is with a sender's.
func benchRelay(b *testing.B, m ceilMode, forward bool) {
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	next := &fakeNext{fakeReceiver: newFakeReceiver(b, m), forward: forward}
	defer next.fakeReceiver.Close()
	cfg := m.receiveConfig()
	cfg.Relay = RelayConfig{To: "next", Dial: func(context.Context, string) (conn.Conn, error) {
		return next, next.reset()
	}}
	how := "write, relay to next, one copy"
	if forward {
		how = "write, relay to next, zero-copy"
	}
	benchReceiveWith(b, m, cfg, 2, out, func() error { return nil }, how)
}

// fakeNext is a relay's next receiver: a fakeReceiver that, if forward,
// takes messages from the receive buffers of the relay's upstream
// connection too (conn.Forwarder, as the RDMA transport does), and that
// stays open for the next stream when the relay closes it.
type fakeNext struct {
	*fakeReceiver
	forward bool
	up      conn.Conn // adopted
}

// Adopt takes up's receive buffers, if f forwards.
func (f *fakeNext) Adopt(up conn.Conn) error {
	if !f.forward {
		return errors.New("fake next receiver: no forwarding")
	}
	f.up = up
	return nil
}

// PostForward completes at once, as PostSend does.
func (f *fakeNext) PostForward(i, n int) error {
	return f.take(f.up.RecvBuf(i)[:n], conn.Completion{Op: conn.OpForward, Buf: i, Len: n})
}

// Close leaves f open: the benchmark closes its fakeReceiver at the end.
func (f *fakeNext) Close() error { return nil }

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
