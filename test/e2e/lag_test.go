package e2e

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// slowChain starts slowReceivers and rdmasend --to them (with sendFlags)
// reading in; it returns the receivers, the read end of the slow one's
// pipe, the others' outputs and the sender.
func slowChain(t *testing.T, in string, slow int, common, lagFlags []string, sendFlags ...string) ([]*proc, *os.File, []string, *proc) {
	t.Helper()
	rs, ports, pr, outs := slowReceivers(t, slow, common, lagFlags)
	return rs, pr, outs, chainSender(t, in, ports, common, sendFlags...)
}

// slowReceivers starts three receivers with small windows, receiver slow
// (with lagFlags) writing to a pipe that nobody reads yet, and waits until
// they listen; it returns them, their ports, the read end of the slow
// one's pipe and the others' outputs.
func slowReceivers(t *testing.T, slow int, common, lagFlags []string) ([]*proc, []int, *os.File, []string) {
	t.Helper()
	window := []string{"-v", "--chunk-size", "256K", "--depth", "4"}
	ports := []int{testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)}
	outs := make([]string, 3)
	rs := make([]*proc, 3)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	for i := range rs {
		args := append(append(append([]string{}, window...), common...), "--relay-allow", suite.host)
		var out io.Writer = pw
		if i == slow {
			args = append(args, lagFlags...)
		} else {
			outs[i] = filepath.Join(t.TempDir(), "out"+strconv.Itoa(i))
			out = createFile(t, outs[i])
		}
		rs[i] = recv(t, ports[i], out, args...)
		rs[i].waitStderr(30*time.Second, listening)
	}
	pw.Close()
	t.Cleanup(func() {
		if t.Failed() {
			for i, r := range rs {
				t.Logf("rdmarecv %d said:\n%s", i, r.stderr.String())
			}
		}
	})
	return rs, ports, pr, outs
}

// chainSender starts rdmasend --to the receivers on ports (with common
// and sendFlags) reading in.
func chainSender(t *testing.T, in string, ports []int, common []string, sendFlags ...string) *proc {
	t.Helper()
	return start(t, "rdmasend", openFile(t, in), io.Discard, append(append(append([]string{"--transport", suite.transport, "-v"}, common...), sendFlags...), "--to", addrs(ports))...)
}

// TestRelayLagSpills: the middle of three receivers writes to a pipe that
// nobody reads until the last receiver has exited 0 with the whole stream
// and the first has written all of it: the middle one's lag (1 MiB in
// memory, the rest in its spill file) takes what its output does not,
// its memory grows by far less than the stream (from its peak before the
// stream), and once the pipe is read the stream comes out exact; rdmasend
// exits 0.
func TestRelayLagSpills(t *testing.T) {
	t.Parallel()
	const n = 32<<20 + 7
	in, want := randomFile(t, n, 44)
	dir := t.TempDir()
	stats := filepath.Join(t.TempDir(), "stats.json")
	rs, ports, pr, outs := slowReceivers(t, 1, nil, []string{"--lag-buffer", "1M", "--spill-max", "128M", "--spill-dir", dir, "--stats-json", stats})
	before := peakRSS(t, rs[1].cmd.Process.Pid)
	s := chainSender(t, in, ports, nil)
	code, stderr := rs[2].wait(2 * time.Minute)
	expect(t, "the last rdmarecv", code, stderr, 0)
	if got, size := fileSum(t, outs[2]); size != n || got != want {
		t.Errorf("the last receiver wrote %d bytes with digest %x, want %d with %x", size, got, n, want)
	}
	testutil.WaitFor(t, time.Minute, "the first receiver to write the stream", func() bool { return fileSize(outs[0]) == n })
	// From its peak before the stream: the race runtime's own memory,
	// which follows no lag, is in both.
	limit := int64(n / 2)
	peak := peakRSS(t, rs[1].cmd.Process.Pid)
	t.Logf("the slow receiver's peak RSS: %d bytes before the stream, %d with its output %d bytes behind", before, peak, n)
	if peak-before > limit {
		t.Errorf("the slow receiver's peak RSS grew by %d bytes while its output is %d bytes behind, want at most %d: its memory follows the lag", peak-before, n, limit)
	}
	if names, err := os.ReadDir(dir); err != nil || len(names) != 0 {
		t.Errorf("the spill directory holds %v (%v), want nothing: the spill file is unlinked at once", names, err)
	}
	h := xxh3.New()
	if m, err := io.Copy(h, pr); m != n || err != nil || digestOf(h) != want {
		t.Errorf("the slow receiver's output gave %d bytes (%v) with digest %x, want %d with %x", m, err, digestOf(h), n, want)
	}
	code, stderr = s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0, "written by all 3 receivers")
	for i := range 2 {
		code, stderr := rs[i].wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
	}
	var sum struct {
		Lag struct {
			Behind  int64 `json:"behind_bytes"`
			Spilled int64 `json:"spilled_bytes"`
		} `json:"lag"`
	}
	if b, err := os.ReadFile(stats); err != nil || json.Unmarshal(b, &sum) != nil || sum.Lag.Spilled == 0 || sum.Lag.Behind < 8<<20 {
		t.Errorf("the slow receiver's --stats-json does not show its spill (want lag.spilled_bytes > 0, behind_bytes >= 8 MiB): %v %+v", err, sum)
	}
}

// TestRelaySlowHostLeaves: in a keyed chain of three, a receiver writes
// to a pipe nobody reads, with a lag of 1 MiB and no spill, the middle
// one (which relays) or the last one: once the lag is full it leaves the
// chain, alone, saying how far it got; the host before it goes on past it
// (or, before the last, alone), the other two write the stream exact, and
// rdmasend exits 8 naming it.
func TestRelaySlowHostLeaves(t *testing.T) {
	t.Parallel()
	const n = 16<<20 + 3
	in, want := randomFile(t, n, 45)
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("the slow chain's shared key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, slow := range []int{1, 2} {
		t.Run([]string{1: "the middle one", 2: "the last one"}[slow], func(t *testing.T) {
			t.Parallel()
			slowHostLeaves(t, in, want, key, slow)
		})
	}
}

// slowHostLeaves runs slowChain of a keyed chain with n bytes from in
// (whose digest is want), receiver slow with a lag of 1 MiB and no spill,
// and checks that it leaves the chain alone.
func slowHostLeaves(t *testing.T, in string, want digest, key string, slow int) {
	const n = 16<<20 + 3
	common := []string{"--key-file", key, "--timeout", bounded(5 * time.Second)}
	rs, pr, outs, s := slowChain(t, in, slow, common, []string{"--lag-buffer", "1M", "--spill-max", "0"})
	code, stderr := rs[slow].wait(2 * time.Minute)
	expect(t, "the slow rdmarecv", code, stderr, 4, "fell behind the stream by more than the lag buffer", "leaves the chain")
	code, stderr = s.wait(2 * time.Minute)
	expect(t, "rdmasend", code, stderr, 8, "written by 2 of 3 receivers (lost in mid-stream: ")
	if args := rs[slow].cmd.Args; !strings.Contains(stderr, net.JoinHostPort(suite.host, slowPort(args))) {
		t.Errorf("rdmasend does not name the slow receiver:\n%s", stderr)
	}
	for _, i := range []int{0, 1, 2} {
		if i == slow {
			continue
		}
		code, stderr := rs[i].wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
		if got, size := fileSum(t, outs[i]); size != n || got != want {
			t.Errorf("receiver %d wrote %d bytes with digest %x, want %d with %x", i, size, got, n, want)
		}
	}
	pr.Close()
}

// peakRSS returns the peak resident set of process pid (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// slowPort returns the --port of a receiver's arguments.
func slowPort(args []string) string {
	for i, a := range args {
		if a == "--port" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
