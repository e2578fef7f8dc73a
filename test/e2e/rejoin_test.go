package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// The tests here redirect a takeover with a TCP proxy, which cannot
// redirect rdma_cm's connections: they run over TCP only (tcpOnly). The
// engine's checks behind them are the same for every transport, and the
// pipe package's tests (TestRejoinClaimsItsStream,
// TestTakeOverCountsTheHostsAhead) cover them over memconn.

// redirector is a TCP proxy on suite.host: its n-th connection (from 0)
// goes on to the address to(n) returns.
func redirector(t *testing.T, to func(n int) string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(suite.host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for n := 0; ; n++ {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to(n))
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			open = append(open, in, out)
			mu.Unlock()
			for _, p := range [][2]net.Conn{{in, out}, {out, in}} {
				wg.Go(func() {
					io.Copy(p[0], p[1])
					p[0].Close()
					p[1].Close()
				})
			}
		}
	})
	return l.Addr().String()
}

// sharedKey writes a key file that every host of the test holds.
func sharedKey(t *testing.T) string {
	t.Helper()
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("one key for the whole cluster, as in docs/broadcast.md"), 0o600); err != nil {
		t.Fatal(err)
	}
	return key
}

// keyedSender starts rdmasend -v --to chain with key, reading what the
// test writes to the returned pipe.
func keyedSender(t *testing.T, key, chain string, extra ...string) (*proc, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	args := append([]string{"--transport", suite.transport, "-v", "--key-file", key, "--timeout", "5s"}, extra...)
	s := start(t, "rdmasend", r, io.Discard, append(args, "--to", chain)...)
	r.Close()
	return s, w
}

// keyedReceiver starts an rdmarecv that relays and takes rejoins with
// key, as an operator would start every host of a keyed broadcast.
func keyedReceiver(t *testing.T, key string) (*proc, string, string) {
	t.Helper()
	port := testutil.FreePort(t)
	out := filepath.Join(t.TempDir(), "out")
	r := recv(t, port, createFile(t, out), "-v", "--relay-allow", suite.host, "--relay", "--key-file", key, "--timeout", "5s")
	r.waitStderr(30*time.Second, listening)
	return r, net.JoinHostPort(suite.host, strconv.Itoa(port)), out
}

// TestRejoinRedirectedToAnotherStream runs two keyed broadcasts under one
// key, A (SA -> A1 -> A2) and B (SB -> B1 -> X), where A's chain reaches
// A2 through a proxy that sends any later connection to X. SB and B1 die,
// so X waits for a sender to take B over; A1 dies, and SA's takeover of
// A2 lands on X. X must refuse it (another stream) and fail, holding only
// the start of B, never B's start followed by A's rest; SA fails too,
// with no receiver left.
func TestRejoinRedirectedToAnotherStream(t *testing.T) {
	t.Parallel()
	tcpOnly(t)
	key := sharedKey(t)
	x, xAddr, xOut := keyedReceiver(t, key)
	b1, b1Addr, _ := keyedReceiver(t, key)
	a2, a2Addr, a2Out := keyedReceiver(t, key)
	a1, a1Addr, _ := keyedReceiver(t, key)
	proxy := redirector(t, func(n int) string {
		if n == 0 {
			return a2Addr // A1's relay
		}
		return xAddr // SA's takeover, redirected
	})
	sb, wb := keyedSender(t, key, b1Addr+","+xAddr)
	sa, wa := keyedSender(t, key, a1Addr+","+proxy)
	startB := bytes.Repeat([]byte("B"), 100000)
	wb.Write(startB)
	wa.Write(bytes.Repeat([]byte("A"), 100000))
	testutil.WaitFor(t, 30*time.Second, "the start of each stream at its last receiver", func() bool {
		return fileSize(xOut) == 100000 && fileSize(a2Out) == 100000
	})
	for _, p := range []*proc{sb, b1, a1} {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(10 * time.Second)
	}
	wa.Write(bytes.Repeat([]byte("a"), 300000))
	wa.Close()

	code, stderr := x.wait(time.Minute)
	expect(t, "rdmarecv X", code, stderr, 4, "no sender took the stream over", "takes over another stream")
	if got, err := os.ReadFile(xOut); err != nil || !bytes.HasPrefix(startB, got) {
		t.Errorf("X wrote %d bytes (%v), not a start of its own stream B: %.40q...", len(got), err, got[min(len(got), 99990):])
	}
	code, stderr = sa.wait(time.Minute)
	expect(t, "rdmasend A", code, stderr, 4, "every receiver was lost")
	code, stderr = a2.wait(time.Minute)
	expect(t, "rdmarecv A2", code, stderr, 4, "no sender took the stream over")
}

// TestTakeOverRedirectedToAnotherHost runs S -> H1 -> H2 -> H3 with a key,
// S naming H2 by a proxy that sends any connection after H1's relay to
// H3. H1 dies: S's takeover of H2 lands on H3, which must refuse it (H3
// is at place 3, not 2); H2, never taken over, fails with a part of the
// stream; S names H1 and H2 lost (exit 8), takes H3 over itself, and
// --stats-json gives each host its own result: H1 and H2 failed, H3 with
// the whole stream.
func TestTakeOverRedirectedToAnotherHost(t *testing.T) {
	t.Parallel()
	tcpOnly(t)
	key := sharedKey(t)
	h3, h3Addr, h3Out := keyedReceiver(t, key)
	h2, h2Addr, _ := keyedReceiver(t, key)
	h1, h1Addr, _ := keyedReceiver(t, key)
	proxy := redirector(t, func(n int) string {
		if n == 0 {
			return h2Addr // H1's relay
		}
		return h3Addr // S's takeover of H2, redirected
	})
	stats := filepath.Join(t.TempDir(), "stats.json")
	s, w := keyedSender(t, key, h1Addr+","+proxy+","+h3Addr, "--stats-json", stats)
	var want bytes.Buffer
	first := bytes.Repeat([]byte("the start of the stream "), 5000)
	w.Write(first)
	want.Write(first)
	t.Cleanup(func() {
		t.Logf("S: %s\nH1: %s\nH2: %s\nH3: %s", s.stderr.String(), h1.stderr.String(), h2.stderr.String(), h3.stderr.String())
	})
	testutil.WaitFor(t, 30*time.Second, "the start of the stream at H3", func() bool { return fileSize(h3Out) == int64(len(first)) })
	h1.cmd.Process.Signal(syscall.SIGKILL)
	h1.wait(10 * time.Second)
	rest := bytes.Repeat([]byte("and the rest, after H1 died "), 20000)
	w.Write(rest)
	want.Write(rest)
	w.Close()

	code, stderr := s.wait(2 * time.Minute)
	expect(t, "rdmasend", code, stderr, 8, "written by 1 of 3 receivers (lost in mid-stream: ", proxy)
	code, stderr2 := h2.wait(time.Minute)
	expect(t, "rdmarecv H2", code, stderr2, 4)
	code, stderr3 := h3.wait(time.Minute)
	expect(t, "rdmarecv H3", code, stderr3, 0)
	if got, err := os.ReadFile(h3Out); err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Errorf("H3 wrote %d bytes (%v), want the %d of the stream", len(got), err, want.Len())
	}
	b, err := os.ReadFile(stats)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Hosts []struct {
			Host  string `json:"host"`
			OK    bool   `json:"ok"`
			Bytes int64  `json:"bytes"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: %v", stats, err)
	}
	hosts := []string{h1Addr, proxy, h3Addr}
	if len(st.Hosts) != len(hosts) {
		t.Fatalf("--stats-json has %d host results, want %d:\n%s", len(st.Hosts), len(hosts), b)
	}
	for i, h := range st.Hosts {
		if ok := i == 2; h.Host != hosts[i] || h.OK != ok || ok && h.Bytes != int64(want.Len()) {
			t.Errorf("host result %d is %+v, want %s ok %v:\n%s", i, h, hosts[i], ok, b)
		}
	}
	if !strings.Contains(stderr, h1Addr) {
		t.Errorf("rdmasend does not name H1 (%s) lost:\n%s", h1Addr, stderr)
	}
}
