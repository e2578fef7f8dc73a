package e2e

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"golang.org/x/sys/unix"
)

// modes are the modes to run the data tests in: RDMA has an event-driven
// default (RDMA WRITE with immediate), --busy-poll, the SEND data path and
// a stream striped over three queue pairs; TCP has one mode.
func modes() map[string][]string {
	if suite.transport == "rdma" {
		return map[string][]string{"events": nil, "busy-poll": {"--busy-poll"},
			"send": {"--rdma-op", "send"}, "3 QPs": {"--qps", "3"}}
	}
	return map[string][]string{"default": nil}
}

// TestSizes streams files around the chunk size and checks the bytes.
func TestSizes(t *testing.T) {
	t.Parallel()
	const chunk = 64 << 10
	sizes := []int64{0, 1, chunk - 1, chunk, chunk + 1, 3*chunk + 7}
	for mode, extra := range modes() {
		for _, n := range sizes {
			t.Run(mode+"/"+itoa(n), func(t *testing.T) {
				in, want := randomFile(t, n, uint64(n))
				streamFile(t, in, want, n, append([]string{"--chunk-size", "64K"}, extra...)...)
			})
		}
	}
}

// TestBigStream streams a large random file with the default settings.
func TestBigStream(t *testing.T) {
	in, want := randomFile(t, suite.bigSize, 42)
	for mode, extra := range modes() {
		t.Run(mode, func(t *testing.T) { streamFile(t, in, want, suite.bigSize, extra...) })
	}
}

// TestUncachedFile streams a file that is not in the page cache, which the
// sender reads with O_DIRECT where the chunk size allows it, and with plain
// preads where it does not (a chunk that is not a multiple of the page).
func TestUncachedFile(t *testing.T) {
	t.Parallel()
	const n = 3<<20 + 5
	for mode, extra := range modes() {
		for _, chunk := range []string{"64K", "1000"} {
			t.Run(mode+"/"+chunk, func(t *testing.T) {
				in, want := randomFile(t, n, 9)
				dropCache(t, in)
				streamFile(t, in, want, n, append([]string{"--chunk-size", chunk}, extra...)...)
			})
		}
	}
}

// dropCache writes the file at path to disk and drops it from the page
// cache.
func dropCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// streamFile sends the file at in and checks that the receiver wrote
// exactly n bytes with digest want, both sides exiting 0, through the
// file fast paths (-v names them).
func streamFile(t *testing.T, in string, want digest, n int64, extra ...string) {
	t.Helper()
	port := testutil.FreePort(t)
	out := filepath.Join(t.TempDir(), "output")
	extra = append(extra, "-v")
	r := recv(t, port, createFile(t, out), extra...)
	s := send(t, port, openFile(t, in), extra...)
	code, stderr := s.wait(5 * time.Minute)
	expect(t, "rdmasend", code, stderr, 0, ", pread")
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv", code, stderr, 0, ", pwrite")
	got, size := fileSum(t, out)
	if size != n || got != want {
		t.Fatalf("received %d bytes with digest %x, want %d bytes with %x", size, got, n, want)
	}
}

// TestEcho sends a short string through real pipes.
func TestEcho(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	var out strings.Builder
	r := recv(t, port, &out)
	s := send(t, port, strings.NewReader("hello, fabric\n"))
	code, stderr := s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv", code, stderr, 0)
	if out.String() != "hello, fabric\n" {
		t.Fatalf("received %q", out.String())
	}
}

// TestInteractive checks that a line reaches the receiver's output while
// the sender's input is still open: a stalled input does not wait for a
// full chunk.
func TestInteractive(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := recv(t, port, outW)
	s := send(t, port, inR)
	outW.Close()
	inR.Close()
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	inW.WriteString("first\n")
	select {
	case l := <-lines:
		if l != "first" {
			t.Fatalf("got %q, want first", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the first line did not arrive while the sender's input stayed open")
	}
	inW.WriteString("second\n")
	inW.Close()
	if l := <-lines; l != "second" {
		t.Fatalf("got %q, want second", l)
	}
	code, stderr := s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv", code, stderr, 0)
}

// TestRelay chains A -> B -> C with `rdmarecv | rdmasend` in the middle.
func TestRelay(t *testing.T) {
	t.Parallel()
	in, want := randomFile(t, 16<<20+3, 9)
	portB, portC := testutil.FreePort(t), testutil.FreePort(t)
	out := filepath.Join(t.TempDir(), "output")
	c := recv(t, portC, createFile(t, out))
	midR, midW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b1 := recv(t, portB, midW)
	b2 := send(t, portC, midR)
	midW.Close()
	midR.Close()
	a := send(t, portB, openFile(t, in))
	for _, p := range []struct {
		name string
		p    *proc
	}{{"A rdmasend", a}, {"B rdmarecv", b1}, {"B rdmasend", b2}, {"C rdmarecv", c}} {
		code, stderr := p.p.wait(5 * time.Minute)
		expect(t, p.name, code, stderr, 0)
	}
	if got, n := fileSum(t, out); got != want {
		t.Fatalf("C received %d bytes with a different digest", n)
	}
}

// TestAutoTransport checks which transport --transport auto picks: RDMA
// where a device reaches the peer, else TCP. auto waits 3 s
// (auto.DefaultRDMATimeout) for the answer to its RDMA connect request,
// which includes the receiver's registration of its buffers, and a loaded
// VM can take longer than that: a fallback for that reason alone says
// nothing of the choice, so the stream is tried again, up to 3 times. It
// runs alone, not in parallel: beside TestRelayLagSpills in the VM, the
// 3 s ran out 3 tries in a row.
func TestAutoTransport(t *testing.T) {
	for try := 1; ; try++ {
		sendErr, timedOut := autoStream(t)
		if !timedOut || t.Failed() {
			return
		}
		if try == 3 {
			t.Fatalf("auto fell back to TCP for want of an RDMA answer in time, %d times in a row:\n%s", try, sendErr)
		}
		t.Logf("try %d: auto fell back to TCP for want of an RDMA answer in time; trying again", try)
	}
}

// autoStream streams 5 bytes with --transport auto on both sides and checks
// the transport each side used (and, with -v, the sender's one line when it
// falls back to TCP), unless (timedOut) the sender fell back to
// TCP because RDMA did not answer in time where RDMA was expected.
func autoStream(t *testing.T) (sendErr string, timedOut bool) {
	port := testutil.FreePort(t)
	dir := t.TempDir()
	sj, rj := filepath.Join(dir, "send.json"), filepath.Join(dir, "recv.json")
	// A small window: the receiver registers it before it answers the
	// RDMA connect request, and a loaded VM took longer than auto's wait
	// to register the default 32 MiB, 3 tries in a row.
	window := []string{"--chunk-size", "256K", "--depth", "4"}
	r := start(t, "rdmarecv", nil, io.Discard, append(window, "--transport", "auto", "--port", itoa(int64(port)), "--bind", suite.host, "--stats-json", rj)...)
	s := start(t, "rdmasend", strings.NewReader("auto\n"), io.Discard, append(window, "--transport", "auto", "-v", "--port", itoa(int64(port)), "--wait", "20s", "--stats-json", sj, suite.host)...)
	code, sendErr := s.wait(time.Minute)
	expect(t, "rdmasend", code, sendErr, 0)
	code, recvErr := r.wait(30 * time.Second)
	expect(t, "rdmarecv", code, recvErr, 0)
	if suite.transport == "rdma" && strings.Contains(sendErr, "(no RDMA answer within") {
		return sendErr, true
	}
	if n := strings.Count(sendErr, "using TCP"); suite.transport == "tcp" && n != 1 {
		t.Errorf("auto fell back to TCP with %d notices, want one line:\n%s", n, sendErr)
	}
	for _, path := range []string{sj, rj} {
		m := stats(t, path)
		if m["transport"] != suite.transport || m["ok"] != true || m["bytes"] != float64(5) {
			t.Errorf("%s: transport %v ok %v bytes %v, want %s true 5; stderr:\n%s\n%s", filepath.Base(path), m["transport"], m["ok"], m["bytes"], suite.transport, sendErr, recvErr)
		}
		if suite.transport == "rdma" && m["device"] == "" {
			t.Errorf("%s names no RDMA device: %v", filepath.Base(path), m)
		}
	}
	return sendErr, false
}
