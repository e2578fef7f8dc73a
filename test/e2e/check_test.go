package e2e

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// noDevice reports whether this environment has no RDMA device: the host
// without RDMA, or the VM after the suite removed its rxe devices
// (RDMAPIPE_E2E_NODEVICE=1).
func noDevice() bool {
	entries, _ := os.ReadDir("/sys/class/infiniband")
	return len(entries) == 0
}

// runCheck runs a command with --check and returns its exit code, stdout
// and stderr. prefix, if any, runs first (prlimit, setpriv).
func runCheck(t *testing.T, prefix []string, bin string, args ...string) (int, string, string) {
	t.Helper()
	var out testutil.Buffer
	name, all := filepath.Join(suite.bin, bin), args
	if len(prefix) > 0 {
		name, all = prefix[0], append(append(prefix[1:], filepath.Join(suite.bin, bin)), args...)
	}
	p := &proc{t: t, name: bin, cmd: exec.Command(name, all...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &out, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		p.code = exitCode(p.cmd.Wait())
		close(p.done)
	}()
	code, stderr := p.wait(time.Minute)
	return code, out.String(), stderr
}

// checkFailed is the exit code --check promises when a stream would not
// work with the suite's --transport: 3, or 7 with --transport rdma (see
// docs/usage.md, "Checking a host").
func checkFailed() int {
	if suite.transport == "rdma" {
		return 7
	}
	return 3
}

// has fails the test unless the report mentions every line start and word.
func has(t *testing.T, report string, words ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(report, w) {
			t.Errorf("the report lacks %q:\n%s", w, report)
		}
	}
}

// TestCheckAgainstReceiver runs rdmasend --check against a receiver that
// serves one stream: a real handshake, no data, and the receiver goes on
// waiting for the real stream, which then arrives whole.
func TestCheckAgainstReceiver(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	var out testutil.Buffer
	r := recv(t, port, &out, "-v")
	r.waitStderr(30*time.Second, listening)
	code, report, stderr := runCheck(t, nil, "rdmasend", append(flags(port, "--check"), suite.host)...)
	expect(t, "rdmasend --check", code, stderr, 0)
	has(t, report, "rdmasend --check "+suite.host, "OK    locked memory", "huge pages", "(no data sent)", "\nOK: a stream to ")
	switch {
	case suite.transport == "rdma":
		// The receiver listens on RDMA only: TCP is a warning.
		has(t, report, "OK    rdma devices", "OK    rdma route", "OK    rdma handshake", "GID index", "<- rdma_cm's choice for", "active MTU", "WARN  tcp handshake", "would go over RDMA")
	case noDevice():
		has(t, report, "WARN  rdma devices  ", "this host has no RDMA device", "fix: load an RDMA driver", "OK    tcp handshake", "would go over TCP")
	}
	r.waitStderr(30*time.Second, "checked the connection (rdmasend --check); waiting for a stream")

	s := send(t, port, strings.NewReader("after the check\n"))
	code, stderr = s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv", code, stderr, 0)
	if got := out.String(); got != "after the check\n" {
		t.Errorf("the receiver wrote %q, want only the real stream", got)
	}
}

// TestCheckFails covers the checks that must not exit 0: nothing listening
// (text and JSON), and a wrong key (the handshake's key proofs fail).
func TestCheckFails(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	code, report, stderr := runCheck(t, nil, "rdmasend", append(flags(port, "--check"), suite.host)...)
	expect(t, "--check with nothing listening", code, stderr, checkFailed(), "rdmasend: check failed: a stream to "+suite.host)
	has(t, report, "FAIL  ", "fix: start the receiver on the peer", "\nFAIL: a stream to ")

	code, report, stderr = runCheck(t, nil, "rdmasend", append(flags(port, "--check", "--json"), suite.host)...)
	expect(t, "--check --json with nothing listening", code, stderr, checkFailed(), "rdmasend: check failed: a stream to "+suite.host)
	var r struct {
		OK     bool `json:"ok"`
		Checks []struct{ Name, Status, Detail, Fix string }
	}
	if err := json.Unmarshal([]byte(report), &r); err != nil {
		t.Fatalf("--json: %v:\n%s", err, report)
	}
	if r.OK || len(r.Checks) < 3 {
		t.Errorf("--json with nothing listening: %+v", r)
	}
	var failed bool
	for _, c := range r.Checks {
		failed = failed || c.Status == "FAIL" && c.Fix != ""
	}
	if !failed {
		t.Errorf("--json: no FAIL check with a fix: %+v", r.Checks)
	}

	keyed := recv(t, port, io.Discard, "-v", "--key", "the receiver's key, long enough")
	keyed.waitStderr(30*time.Second, listening)
	code, report, stderr = runCheck(t, nil, "rdmasend", append(flags(port, "--check", "--key", "another key, long enough too"), suite.host)...)
	// A check's failure is 3 (or 7), a wrong key included: the report
	// says which check failed, not the exit code (6 is a stream's).
	expect(t, "--check with a wrong key", code, stderr, checkFailed(), "rdmasend: check failed: a stream to "+suite.host)
	has(t, report, "FAIL  ", "fix: give both sides the same key", "\nFAIL: a stream to ")
}

// TestCheckReceiver runs rdmarecv --check: listening works on a free port
// and fails on a port in use.
func TestCheckReceiver(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	code, report, stderr := runCheck(t, nil, "rdmarecv", flags(port, "--check", "--bind", suite.host)...)
	expect(t, "rdmarecv --check", code, stderr, 0)
	has(t, report, "rdmarecv --check (--transport "+suite.transport+")", "OK    tcp listen", "locked memory", "\nOK: a receiver listening on ")
	if suite.transport == "rdma" {
		has(t, report, "OK    rdma listen")
	}

	busy := recv(t, port, io.Discard, "-v")
	busy.waitStderr(30*time.Second, listening)
	code, report, stderr = runCheck(t, nil, "rdmarecv", flags(port, "--check", "--bind", suite.host)...)
	expect(t, "rdmarecv --check on a port in use", code, stderr, checkFailed(), "rdmarecv: check failed: a receiver listening on ")
	has(t, report, "FAIL  ", "fix: stop whatever uses the port", "\nFAIL: a receiver listening on ")
}

// TestCheckMemlock runs the check as a user without CAP_IPC_LOCK whose
// locked memory is limited: 8 MiB shrinks the window (a warning), 64 KiB
// is too little for RDMA (a failure where RDMA is needed).
func TestCheckMemlock(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"prlimit", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Unmet(t, "no %s", tool)
		}
	}
	cases := []struct {
		name, limit string
		says        []string
	}{
		{"8 MiB", "8388608", []string{"RLIMIT_MEMLOCK soft 8 MiB, hard 8 MiB, no CAP_IPC_LOCK: the default window shrinks to", "fix: ulimit -l unlimited"}},
		{"64 KiB", "65536", []string{"RLIMIT_MEMLOCK soft 64 KiB, hard 64 KiB, no CAP_IPC_LOCK: too little for RDMA buffers", "fix: ulimit -l unlimited"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []string{"prlimit", "--memlock=" + tc.limit + ":" + tc.limit, "--", "setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"}
			code, report, stderr := runCheck(t, prefix, "rdmarecv", flags(testutil.FreePort(t), "--check", "--bind", suite.host)...)
			has(t, report, tc.says...)
			// Too little for RDMA fails only where RDMA is needed, and
			// then as RDMA not available (7).
			if tc.limit == "65536" && suite.transport == "rdma" {
				expect(t, "rdmarecv --check", code, stderr, 7, "rdmarecv: check failed: ")
				has(t, report, "FAIL  locked memory")
			} else {
				expect(t, "rdmarecv --check", code, stderr, 0)
				has(t, report, "WARN  locked memory")
			}
		})
	}
}

// TestCheckNoDevice checks that a host without RDMA devices says so
// clearly, fails --transport rdma, and still checks the TCP path.
func TestCheckNoDevice(t *testing.T) {
	t.Parallel()
	if !noDevice() {
		t.Skip("this host has RDMA devices")
	}
	port := testutil.FreePort(t)
	r := start(t, "rdmarecv", nil, io.Discard, "--transport", "tcp", "--port", itoa(int64(port)), "--bind", suite.host, "-v")
	r.waitStderr(30*time.Second, listening)
	code, report, stderr := runCheck(t, nil, "rdmasend", "--check", "--port", itoa(int64(port)), suite.host)
	expect(t, "--check (auto) without devices", code, stderr, 0)
	has(t, report, "WARN  rdma devices", "none: this host has no RDMA device", "OK    tcp handshake", "would go over TCP (no RDMA path")
	code, report, stderr = runCheck(t, nil, "rdmasend", "--check", "--transport", "rdma", "--port", itoa(int64(port)), suite.host)
	expect(t, "--check --transport rdma without devices", code, stderr, 7, "rdmasend: check failed: a stream to ")
	has(t, report, "FAIL  rdma devices", "OK    tcp handshake", "\nFAIL: ")
}
