package e2e

import (
	"bytes"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// relayChain starts n rdmarecv, each but the last with --forward to the
// next, last first (a relay connects on when its sender does), and
// returns them with their ports and output files.
func relayChain(t *testing.T, n int, extra ...string) (hops []*proc, ports []int, outs []string) {
	t.Helper()
	ports = make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	hops, outs = make([]*proc, n), make([]string, n)
	for i := n - 1; i >= 0; i-- {
		outs[i] = filepath.Join(t.TempDir(), "out"+strconv.Itoa(i))
		args := append([]string{"-v"}, extra...)
		if i+1 < n {
			args = append(args, "--forward", net.JoinHostPort(suite.host, strconv.Itoa(ports[i+1])))
		}
		hops[i] = recv(t, ports[i], createFile(t, outs[i]), args...)
		hops[i].waitStderr(30*time.Second, listening)
	}
	return hops, ports, outs
}

// TestForward streams through three receivers chained with --forward: every
// one writes the whole stream and exits 0, and so does the sender.
func TestForward(t *testing.T) {
	const n = 16<<20 + 5
	in, want := randomFile(t, n, 77)
	hops, _, outs := relayChain(t, 3)
	s := send(t, hopsPort(hops, 0), openFile(t, in), "-v")
	code, stderr := s.wait(5 * time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	for i, h := range hops {
		code, stderr := h.wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
		if got, size := fileSum(t, outs[i]); size != n || got != want {
			t.Errorf("receiver %d wrote %d bytes with sha256 %x, want %d with %x", i, size, got, n, want)
		}
	}
	expect(t, "rdmarecv 0", hops[0].code, hops[0].stderr.String(), 0, "relay to")
}

// hopsPort returns the port receiver i of a chain listens on.
func hopsPort(hops []*proc, i int) int {
	for j, a := range hops[i].cmd.Args {
		if a == "--port" {
			p, _ := strconv.Atoi(hops[i].cmd.Args[j+1])
			return p
		}
	}
	return 0
}

// TestForwardHopKilled kills the last receiver of a chain mid-stream: the
// sender and the other receivers exit 4, the sender naming the lost one.
func TestForwardHopKilled(t *testing.T) {
	hops, ports, outs := relayChain(t, 3, "--timeout", "20s")
	s, inW := slowInput(t, ports[0], "--timeout", "20s")
	inW.Write(bytes.Repeat([]byte("z"), 100000))
	waitFor(t, 30*time.Second, "data at the last receiver", func() bool { return fileSize(outs[2]) == 100000 })
	hops[2].cmd.Process.Signal(syscall.SIGKILL)
	hops[2].wait(10 * time.Second)
	inW.Write(bytes.Repeat([]byte("z"), 100000))
	lost := "forward to " + net.JoinHostPort(suite.host, strconv.Itoa(ports[2]))
	code, stderr := s.wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 4, lost)
	for i := range 2 {
		code, stderr := hops[i].wait(60 * time.Second)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 4, lost)
	}
}

// slowWriter writes through to w, one small piece at a time.
type slowWriter struct{ w *bytes.Buffer }

func (s *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	return s.w.Write(p)
}

// TestForwardSlowHop throttles the middle receiver's output: the chain slows
// down to it and nothing is lost anywhere.
func TestForwardSlowHop(t *testing.T) {
	const n = 4 << 20
	in, want := randomFile(t, n, 78)
	ports := []int{freePort(t), freePort(t), freePort(t)}
	dir := t.TempDir()
	last := filepath.Join(dir, "last")
	h2 := recv(t, ports[2], createFile(t, last), "-v")
	h2.waitStderr(30*time.Second, listening)
	var slow bytes.Buffer
	h1 := recv(t, ports[1], &slowWriter{w: &slow}, "-v", "--forward", net.JoinHostPort(suite.host, strconv.Itoa(ports[2])))
	h1.waitStderr(30*time.Second, listening)
	first := filepath.Join(dir, "first")
	h0 := recv(t, ports[0], createFile(t, first), "-v", "--forward", net.JoinHostPort(suite.host, strconv.Itoa(ports[1])))
	h0.waitStderr(30*time.Second, listening)
	s := send(t, ports[0], openFile(t, in))
	code, stderr := s.wait(5 * time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	for i, h := range []*proc{h0, h1, h2} {
		code, stderr := h.wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
	}
	for _, out := range []string{first, last} {
		if got, size := fileSum(t, out); size != n || got != want {
			t.Errorf("%s: %d bytes with sha256 %x, want %d with %x", out, size, got, n, want)
		}
	}
	if slow.Len() != n {
		t.Errorf("the slow receiver wrote %d bytes, want %d", slow.Len(), n)
	}
}
