package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// killMidStream starts a sender to port, feeds it 1 MiB, waits until
// arrived says it is there, and kills the sender.
func killMidStream(t *testing.T, port int, arrived func() bool) {
	t.Helper()
	doomed, in := slowInput(t, port)
	in.Write(bytes.Repeat([]byte{'x'}, 1<<20))
	testutil.WaitFor(t, 60*time.Second, "the first MiB", arrived)
	doomed.cmd.Process.Kill()
}

// parts returns the part files left in dir.
func parts(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".*.part-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// names lists dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ns []string
	for _, e := range es {
		ns = append(ns, e.Name())
	}
	return ns
}

// failedStream matches rdmarecv's line for a stream that failed while it
// serves on.
var failedStream = regexp.MustCompile(`rdmarecv: stream 1 from \S+ failed: .*\(waiting for the next sender\)`)

// TestOutputKeepsStreamsApart serves a sender killed after 1 MiB and then
// a good one with -k --output: only the good stream lands, under its own
// name, bytes equal; the failed one leaves no file, no part file stays,
// and SIGTERM ends the receiver non-zero, since a stream failed.
func TestOutputKeepsStreamsApart(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	dir := t.TempDir()
	r := recv(t, port, nil, "-k", "-v", "--output", filepath.Join(dir, "in-%n.bin"))
	r.waitStderr(30*time.Second, listening)

	killMidStream(t, port, func() bool {
		ps := parts(t, dir)
		return len(ps) == 1 && fileSize(ps[0]) == 1<<20
	})
	r.waitStderrMatch(60*time.Second, failedStream)

	in, sum := randomFile(t, 1<<20, 30)
	code, stderr := send(t, port, openFile(t, in)).wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 0)
	if got := names(t, dir); len(got) != 1 || got[0] != "in-2.bin" {
		t.Fatalf("after the good stream %s holds %q, want only in-2.bin", dir, got)
	}
	if got, n := fileSum(t, filepath.Join(dir, "in-2.bin")); got != sum {
		t.Errorf("in-2.bin: %d bytes, not the good stream's", n)
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv -k --output", code, stderr, 4, "1 of 2 streams failed")
	if got := names(t, dir); len(got) != 1 {
		t.Errorf("after rdmarecv exited %s holds %q, want only in-2.bin", dir, got)
	}
}

// TestOutputNeverOverwrites: an --output name that exists fails its
// stream (the sender exits non-zero) and keeps the file as it was.
func TestOutputNeverOverwrites(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	dir := t.TempDir()
	taken := filepath.Join(dir, "in-1")
	if err := os.WriteFile(taken, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := recv(t, port, nil, "-k", "-v", "--output", filepath.Join(dir, "in-%n"))
	r.waitStderr(30*time.Second, listening)
	code, stderr := send(t, port, strings.NewReader("theirs")).wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 4, "exists: the receiver never overwrites a file")
	code, stderr = send(t, port, strings.NewReader("next")).wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 0)
	r.cmd.Process.Signal(syscall.SIGTERM)
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv -k --output", code, stderr, 4)
	if b, _ := os.ReadFile(taken); string(b) != "mine" {
		t.Errorf("in-1 holds %q, want what it held", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "in-2")); string(b) != "next" {
		t.Errorf("in-2 holds %q, want the second stream", b)
	}
	if ps := parts(t, dir); len(ps) > 0 {
		t.Errorf("part files left: %q", ps)
	}
}

// TestExecStreams gives each stream to its own sh -c: a good stream
// arrives whole through cat with its number and sender in the
// environment; a stream whose sender is killed stops the command with
// SIGTERM, which it sees before the end of its stdin; the receiver serves
// on and exits non-zero on SIGTERM.
func TestExecStreams(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	dir := t.TempDir()
	// The trap runs once cat has ended: "eof 0" if cat saw the end of
	// its stdin, "terminated" if the group was sent SIGTERM.
	cmd := `trap 'echo terminated > verdict-$RDMAPIPE_STREAM; exit 143' TERM; echo "$RDMAPIPE_PEER" > peer-$RDMAPIPE_STREAM; cat > out-$RDMAPIPE_STREAM; echo "eof $?" > verdict-$RDMAPIPE_STREAM`
	r := recv(t, port, nil, "-k", "-v", "--exec", "cd "+dir+" && "+cmd)
	r.waitStderr(30*time.Second, listening)

	killMidStream(t, port, func() bool { return fileSize(filepath.Join(dir, "out-1")) == 1<<20 })
	r.waitStderrMatch(60*time.Second, failedStream)
	if b, _ := os.ReadFile(filepath.Join(dir, "verdict-1")); string(b) != "terminated\n" {
		t.Errorf("the command of the killed stream ended with %q, want \"terminated\" (SIGTERM before the end of its stdin)", b)
	}

	in, sum := randomFile(t, 1<<20, 31)
	code, stderr := send(t, port, openFile(t, in)).wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 0)
	if got, n := fileSum(t, filepath.Join(dir, "out-2")); got != sum {
		t.Errorf("out-2: %d bytes, not the good stream's", n)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "verdict-2")); string(b) != "eof 0\n" {
		t.Errorf("the good stream's command ended with %q, want \"eof 0\"", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "peer-2")); len(bytes.TrimSpace(b)) == 0 {
		t.Errorf("RDMAPIPE_PEER was empty")
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv -k --exec", code, stderr, 4, "1 of 2 streams failed")
}

// TestExecFails: a command that exits 1, after reading the whole stream
// or without reading it, fails the stream towards the sender.
func TestExecFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, cmd, says string }{
		{"after the stream", "cat > /dev/null; exit 1", "it read the whole stream, then exited with status 1"},
		{"without reading it", "exit 1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := testutil.FreePort(t)
			r := recv(t, port, nil, "-v", "--exec", tc.cmd)
			r.waitStderr(30*time.Second, listening)
			code, stderr := send(t, port, bytes.NewReader(bytes.Repeat([]byte{'z'}, 4<<20))).wait(60 * time.Second)
			if code == 0 {
				t.Fatalf("rdmasend exited 0 though the receiver's command exited 1; stderr:\n%s", stderr)
			}
			expect(t, "rdmasend", code, stderr, 4, tc.says)
			code, stderr = r.wait(30 * time.Second)
			expect(t, "rdmarecv --exec", code, stderr, 4, "exited with status 1")
		})
	}
}
