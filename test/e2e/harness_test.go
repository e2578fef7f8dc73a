// Package e2e runs the built rdmasend and rdmarecv binaries end to end.
//
// The same tests run on the host over TCP on loopback (the default) and
// inside the SoftRoCE VM over real verbs (test/softroce/run-suite.sh sets
// RDMAPIPE_E2E_TRANSPORT=rdma, RDMAPIPE_E2E_HOST to the rxe address and
// RDMAPIPE_BIN to prebuilt binaries, since nothing is compiled in the VM).
package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// env is the environment the suite runs in.
type env struct {
	transport string // --transport value: tcp or rdma
	host      string // address the receiver listens on and the sender dials
	bin       string // directory holding rdmasend and rdmarecv
	bigSize   int64  // size of the large random stream
}

var suite env

// race is whether this test binary was built with -race: then the
// commands it runs are too, so that a data race in them fails the test
// that meets it (a race report exits 66).
const race = testutil.Race

func TestMain(m *testing.M) {
	suite = env{
		transport: getenv("RDMAPIPE_E2E_TRANSPORT", "tcp"),
		host:      getenv("RDMAPIPE_E2E_HOST", "127.0.0.1"),
		bigSize:   256 << 20,
	}
	if s := os.Getenv("RDMAPIPE_E2E_BIG_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "RDMAPIPE_E2E_BIG_MIB=%q: %v\n", s, err)
			os.Exit(2)
		}
		suite.bigSize = int64(n) << 20
	}
	dir, err := testutil.Commands(race)
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the commands:", err)
		os.Exit(2)
	}
	suite.bin = dir
	code := m.Run()
	removeShared()
	os.Exit(code)
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// proc is a started rdmasend or rdmarecv.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stderr testutil.Buffer
	done   chan struct{}
	code   int       // exit code, valid once done is closed
	ended  time.Time // when the exit was seen, valid once done is closed
}

// start runs binary name with args; stdin and stdout are what the caller
// wires up (nil: /dev/null and discard).
func start(t *testing.T, name string, stdin io.Reader, stdout io.Writer, args ...string) *proc {
	t.Helper()
	return startWith(t, nil, name, stdin, stdout, args...)
}

// startWith is start with a command line prefix that runs the command
// (prlimit, setpriv).
func startWith(t *testing.T, prefix []string, name string, stdin io.Reader, stdout io.Writer, args ...string) *proc {
	t.Helper()
	argv := append(append(prefix, filepath.Join(suite.bin, name)), args...)
	p := &proc{t: t, name: name, cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = stdin, stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		err := p.cmd.Wait()
		p.code, p.ended = exitCode(err), time.Now()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill sends the process SIGKILL and waits for it to end. One that SIGKILL
// does not end within a minute is stuck in the kernel: the test fails with
// where (its threads' kernel stacks), instead of hanging the suite.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.t.Errorf("%s (pid %d) did not end within a minute of SIGKILL: stuck in the kernel at\n%s\nother tasks in D state:\n%s\nkernel log:\n%s",
			p.name, p.cmd.Process.Pid, kernelStacks(p.cmd.Process.Pid), blockedTasks(), kernelLog())
	}
}

// blockedTasks returns the kernel stack of every task in uninterruptible
// sleep (D state): what a process stuck in the kernel may wait for, a
// kernel worker say.
func blockedTasks() string {
	var b strings.Builder
	tasks, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*")
	for _, task := range tasks {
		stat, err := os.ReadFile(task + "/stat")
		// pid (comm) state ...: comm may hold spaces and parentheses
		i := strings.LastIndexByte(string(stat), ')')
		if err != nil || i < 0 || !strings.HasPrefix(string(stat[i+1:]), " D") {
			continue
		}
		stack, _ := os.ReadFile(task + "/stack")
		fmt.Fprintf(&b, "task %s %s:\n%s", task, stat[:i+1], stack)
	}
	return b.String()
}

// kernelLog returns the end of the kernel log, or why it cannot.
func kernelLog() string {
	out, err := exec.Command("dmesg").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("dmesg: %v %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// kernelStacks returns the state and kernel stack of each thread of pid,
// as /proc shows them to root.
func kernelStacks(pid int) string {
	var b strings.Builder
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		status, _ := os.ReadFile(task + "/status")
		stack, err := os.ReadFile(task + "/stack")
		if err != nil {
			stack = []byte(err.Error() + "\n")
		}
		state := ""
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "State:") {
				state = strings.TrimSpace(strings.TrimPrefix(line, "State:"))
			}
		}
		fmt.Fprintf(&b, "thread %s (%s):\n%s", filepath.Base(task), state, stack)
	}
	return b.String()
}

// bounded returns limit scaled by testutil.Bound, as a command-line
// duration: a process's own bound (--timeout) must hold on a loaded
// machine as the test's do.
func bounded(limit time.Duration) string {
	return testutil.Bound(limit).Round(100 * time.Millisecond).String()
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

// wait waits up to limit (scaled by testutil.Bound) for the process to
// exit and returns its exit code and stderr. It fails the test if the
// process reported a data race (built with -race, it exits 66 then only if
// it would have exited 0).
func (p *proc) wait(limit time.Duration) (int, string) {
	p.t.Helper()
	limit = testutil.Bound(limit)
	select {
	case <-p.done:
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			p.t.Errorf("%s reported a data race:\n%s", p.name, p.stderr.String())
		}
		return p.code, p.stderr.String()
	case <-time.After(limit):
		p.kill()
		p.t.Fatalf("%s did not exit within %v; stderr:\n%s", p.cmd.Path, limit, p.stderr.String())
		return 0, ""
	}
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitStderr waits up to limit until the process has written s to stderr,
// and fails the test if it exits or the limit passes first.
func (p *proc) waitStderr(limit time.Duration, s string) {
	p.t.Helper()
	p.waitStderrFor(limit, strconv.Quote(s), func(stderr string) bool { return strings.Contains(stderr, s) })
}

// waitStderrMatch is waitStderr for a line that matches re.
func (p *proc) waitStderrMatch(limit time.Duration, re *regexp.Regexp) {
	p.t.Helper()
	p.waitStderrFor(limit, "/"+re.String()+"/", re.MatchString)
}

// waitStderrFor waits up to limit (scaled by testutil.Bound) until the
// process's stderr so far satisfies ok (what says what it waits for), and
// fails the test if it exits or the limit passes first.
func (p *proc) waitStderrFor(limit time.Duration, what string, ok func(stderr string) bool) {
	p.t.Helper()
	limit = testutil.Bound(limit)
	deadline := time.Now().Add(limit)
	for !ok(p.stderr.String()) {
		if p.exited() {
			p.t.Fatalf("%s exited %d before writing %s; stderr:\n%s", p.name, p.code, what, p.stderr.String())
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not write %s within %v; stderr:\n%s", p.name, what, limit, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listening is the line rdmarecv -v writes once it accepts connections.
const listening = "rdmarecv: listening on"

// flags are the flags every invocation gets: the transport and port.
func flags(port int, extra ...string) []string {
	return append([]string{"--transport", suite.transport, "--port", strconv.Itoa(port)}, extra...)
}

// recv starts a receiver on port writing to out.
func recv(t *testing.T, port int, out io.Writer, extra ...string) *proc {
	return start(t, "rdmarecv", nil, out, append(flags(port, "--bind", suite.host), extra...)...)
}

// send starts a sender to port reading in; it waits for the receiver.
func send(t *testing.T, port int, in io.Reader, extra ...string) *proc {
	args := append(flags(port, "--wait", "20s"), extra...)
	return start(t, "rdmasend", in, io.Discard, append(args, suite.host)...)
}

// randomFile writes n deterministic pseudo-random bytes to a temp file and
// returns its path and digest.
func randomFile(t *testing.T, n int64, seed uint64) (string, digest) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := xxh3.New()
	src := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7})
	if _, err := io.CopyN(io.MultiWriter(f, h), src, n); err != nil {
		t.Fatal(err)
	}
	return path, digestOf(h)
}

// digest is what the tests compare streams by: XXH3's 128 bits, which the
// SoftRoCE VM's emulated CPU computes 40 times as fast as SHA-256 (about
// 1 GB/s against 23 MB/s).
type digest = [16]byte

// digestOf returns h's digest.
func digestOf(h *xxh3.Hasher) digest { return h.Sum128().Bytes() }

// fileSum returns the digest and size of a file.
func fileSum(t *testing.T, path string) (digest, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := xxh3.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return digestOf(h), n
}

// openFile opens path for reading, closed at the end of the test.
func openFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// createFile creates path for writing, closed at the end of the test.
func createFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// stats reads a --stats-json file.
func stats(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// expect checks an exit code and that stderr mentions every one of words.
func expect(t *testing.T, who string, code int, stderr string, want int, words ...string) {
	t.Helper()
	if code != want {
		t.Errorf("%s exited %d, want %d; stderr:\n%s", who, code, want, stderr)
	}
	for _, w := range words {
		if !strings.Contains(strings.ToLower(stderr), strings.ToLower(w)) {
			t.Errorf("%s stderr does not mention %q:\n%s", who, w, stderr)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
