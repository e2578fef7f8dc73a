package e2e

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// The tests here play a lying key holder against the slow-host path: a
// host that leaves a keyed chain because its output fell behind, and the
// takeover of the host after it by the host before it, redirected by a
// TCP proxy (redirector) to a host that must refuse it. Over TCP only
// (tcpOnly), as rejoin_test.go's.

// slowWindow is the window of every receiver of these tests: small, so
// that a lag of 1 MiB fills within the stream.
var slowWindow = []string{"--chunk-size", "256K", "--depth", "4"}

// trustReceiver starts a keyed rdmarecv that relays and takes rejoins,
// waiting timeout for a taker-over, writing to out, and returns it and
// its address.
func trustReceiver(t *testing.T, key, timeout string, out io.Writer, extra ...string) (*proc, string) {
	t.Helper()
	port := testutil.FreePort(t)
	args := append([]string{"-v", "--relay-allow", suite.host, "--relay", "--key-file", key, "--timeout", timeout}, slowWindow...)
	r := recv(t, port, out, append(args, extra...)...)
	r.waitStderr(30*time.Second, listening)
	return r, net.JoinHostPort(suite.host, strconv.Itoa(port))
}

// fileReceiver is trustReceiver writing to a file of its own, whose path
// it returns too.
func fileReceiver(t *testing.T, key, timeout string) (*proc, string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	r, addr := trustReceiver(t, key, timeout, createFile(t, out))
	return r, addr, out
}

// leavingReceiver is trustReceiver writing to a pipe nobody reads, with a
// lag of 1 MiB and no spill: in a keyed chain it leaves once its lag is
// full.
func leavingReceiver(t *testing.T, key string) (*proc, string) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	r, addr := trustReceiver(t, key, "5s", pw, "--lag-buffer", "1M", "--spill-max", "0")
	pw.Close()
	return r, addr
}

// slowSender starts rdmasend with key --to chain, reading 16 MiB of its
// own, and returns it and the input's digest.
func slowSender(t *testing.T, key, chain string) (*proc, digest) {
	t.Helper()
	in, want := randomFile(t, 16<<20+3, 46)
	s := start(t, "rdmasend", openFile(t, in), io.Discard, "--transport", suite.transport, "-v", "--key-file", key, "--timeout", "5s", "--to", chain)
	return s, want
}

// logAll logs what every process said, once the test failed.
func logAll(t *testing.T, ps map[string]*proc) {
	t.Cleanup(func() {
		if t.Failed() {
			for name, p := range ps {
				t.Logf("%s said:\n%s", name, p.stderr.String())
			}
		}
	})
}

// TestSlowHostLeaveRedirectedToAnotherStream runs two keyed broadcasts
// under one key: B (SB -> B1 -> X), whose SB and B1 die so that X waits
// for a sender to take B over, then A (SA -> A1 -> SLOW -> A3), A3 named
// by a proxy that sends any connection after SLOW's relay to X. SLOW's
// output is never read: it leaves, and A1's takeover of A3 lands on X,
// which must refuse it (another stream) and keep only a start of B, never
// B's start and A's rest. A1 goes on alone: SA exits 8 naming SLOW and A3.
func TestSlowHostLeaveRedirectedToAnotherStream(t *testing.T) {
	t.Parallel()
	tcpOnly(t)
	key := sharedKey(t)
	x, xAddr, xOut := fileReceiver(t, key, "20s")
	b1, b1Addr, _ := fileReceiver(t, key, "5s")
	a3, a3Addr, _ := fileReceiver(t, key, "5s")
	slow, slowAddr := leavingReceiver(t, key)
	a1, a1Addr, a1Out := fileReceiver(t, key, "5s")
	proxy := redirector(t, func(n int) string {
		if n == 0 {
			return a3Addr // SLOW's relay
		}
		return xAddr // A1's takeover, redirected
	})
	sb, wb := keyedSender(t, key, b1Addr+","+xAddr)
	startB := bytes.Repeat([]byte("B"), 100000)
	wb.Write(startB)
	testutil.WaitFor(t, 30*time.Second, "the start of B at X", func() bool { return fileSize(xOut) == 100000 })
	for _, p := range []*proc{sb, b1} {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(10 * time.Second)
	}
	sa, want := slowSender(t, key, a1Addr+","+slowAddr+","+proxy)
	logAll(t, map[string]*proc{"X": x, "A1": a1, "SLOW": slow, "A3": a3, "SA": sa})

	code, stderr := slow.wait(2 * time.Minute)
	expect(t, "rdmarecv SLOW", code, stderr, 4, "leaves the chain")
	code, stderr = x.wait(2 * time.Minute)
	expect(t, "rdmarecv X", code, stderr, 4, "no sender took the stream over", "takes over another stream")
	if got, err := os.ReadFile(xOut); err != nil || !bytes.HasPrefix(startB, got) {
		t.Errorf("X wrote %d bytes (%v), not a start of its own stream B", len(got), err)
	}
	code, stderr = sa.wait(2 * time.Minute)
	expect(t, "rdmasend A", code, stderr, 8, "written by 1 of 3 receivers (lost in mid-stream: ", slowAddr, proxy)
	code, stderr = a1.wait(time.Minute)
	expect(t, "rdmarecv A1", code, stderr, 0)
	if got, size := fileSum(t, a1Out); size != 16<<20+3 || got != want {
		t.Errorf("A1 wrote %d bytes with digest %x, want the stream's %x", size, got, want)
	}
	code, stderr = a3.wait(time.Minute)
	expect(t, "rdmarecv A3", code, stderr, 4, "no sender took the stream over")
}

// TestSlowHostLeaveRedirectedToAnotherPlace runs S -> H1 -> SLOW -> H3 ->
// H4 with a key, H3 named by a proxy that sends any connection after
// SLOW's relay to H4. SLOW leaves; H1's takeover of H3 lands on H4, which
// must refuse it (H4 is at place 4, not 3) once it takes takeovers at
// all; H3, never taken over, fails; H1 takes H4 over itself, at its own
// place: H1 and H4 write the stream exact, S exits 8 naming SLOW and H3.
func TestSlowHostLeaveRedirectedToAnotherPlace(t *testing.T) {
	t.Parallel()
	tcpOnly(t)
	key := sharedKey(t)
	h4, h4Addr, h4Out := fileReceiver(t, key, "20s")
	h3, h3Addr, _ := fileReceiver(t, key, "5s")
	slow, slowAddr := leavingReceiver(t, key)
	h1, h1Addr, h1Out := fileReceiver(t, key, "5s")
	proxy := redirector(t, func(n int) string {
		if n == 0 {
			return h3Addr // SLOW's relay
		}
		return h4Addr // H1's takeover of H3, redirected
	})
	s, want := slowSender(t, key, h1Addr+","+slowAddr+","+proxy+","+h4Addr)
	logAll(t, map[string]*proc{"H1": h1, "SLOW": slow, "H3": h3, "H4": h4, "S": s})

	code, stderr := slow.wait(2 * time.Minute)
	expect(t, "rdmarecv SLOW", code, stderr, 4, "leaves the chain")
	code, stderr = s.wait(2 * time.Minute)
	expect(t, "rdmasend", code, stderr, 8, "written by 2 of 4 receivers (lost in mid-stream: ", slowAddr, proxy)
	code, stderr = h3.wait(time.Minute)
	expect(t, "rdmarecv H3", code, stderr, 4)
	for name, p := range map[string]*proc{"H1": h1, "H4": h4} {
		code, stderr := p.wait(time.Minute)
		expect(t, "rdmarecv "+name, code, stderr, 0)
	}
	for name, out := range map[string]string{"H1": h1Out, "H4": h4Out} {
		if got, size := fileSum(t, out); size != 16<<20+3 || got != want {
			t.Errorf("%s wrote %d bytes with digest %x, want the stream's %x", name, size, got, want)
		}
	}
}
