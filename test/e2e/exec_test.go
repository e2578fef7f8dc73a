package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestExecReceiverKilled gives each stream to a pipeline that marks a
// clean end of its stdin: a whole stream is marked, with its byte count;
// a stream cut by SIGKILL to rdmarecv (as the OOM killer sends) is not,
// not even by wc, and the pipeline's whole process group is gone.
func TestExecReceiverKilled(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	dir := t.TempDir()
	cmd := `echo $$ > pid-$RDMAPIPE_STREAM; tee got-$RDMAPIPE_STREAM | wc -c > n-$RDMAPIPE_STREAM && echo done > marker-$RDMAPIPE_STREAM`
	r := recv(t, port, nil, "-k", "-v", "--exec", "cd "+dir+" && "+cmd)
	r.waitStderr(30*time.Second, listening)

	in, sum := randomFile(t, 4<<20, 32)
	code, stderr := send(t, port, openFile(t, in)).wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 0)
	if got, n := fileSum(t, filepath.Join(dir, "got-1")); got != sum {
		t.Errorf("got-1: %d bytes, not the stream's", n)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "n-1")); strings.TrimSpace(string(b)) != strconv.Itoa(4<<20) {
		t.Errorf("wc -c of the whole stream wrote %q, want %d", b, 4<<20)
	}
	if _, err := os.Stat(filepath.Join(dir, "marker-1")); err != nil {
		t.Errorf("the whole stream's pipeline did not see the end of its stdin: %v", err)
	}

	_, w := slowInput(t, port) // holds the rest of the stream back
	w.Write(bytes.Repeat([]byte{'x'}, 1<<20))
	testutil.WaitFor(t, 60*time.Second, "the first MiB through tee", func() bool { return fileSize(filepath.Join(dir, "got-2")) == 1<<20 })
	pgid := groupOf(t, filepath.Join(dir, "pid-2"))
	r.cmd.Process.Kill()
	testutil.WaitFor(t, 60*time.Second, "the end of the cut stream's process group", func() bool { return len(liveInGroup(pgid)) == 0 })
	// wc writes only at the end of its stdin, sh (rdmarecv's child) only
	// after wc.
	n, _ := os.ReadFile(filepath.Join(dir, "n-2"))
	_, err := os.Stat(filepath.Join(dir, "marker-2"))
	if len(n) > 0 || err == nil {
		t.Errorf("the cut stream's pipeline saw a clean end of its stdin after rdmarecv was killed (wc -c wrote %q, marker written: %v)", n, err == nil)
	}
}

// groupOf returns the process group of the live process whose pid is in
// the file at path.
func groupOf(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, pgrp, ok := procStat("/proc/" + strings.TrimSpace(string(b)) + "/stat")
	if !ok {
		t.Fatalf("no process %s (from %s)", b, path)
	}
	return pgrp
}

// liveInGroup lists the processes of group pgid that have not exited
// (a zombie has, though its parent has not yet waited for it).
func liveInGroup(pgid int) []string {
	var live []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		if state, pgrp, ok := procStat(path); ok && pgrp == pgid && state != "Z" {
			live = append(live, path)
		}
	}
	return live
}

// procStat returns the state and process group in the /proc stat file at
// path, ok false if it cannot be read.
func procStat(path string) (state string, pgrp int, ok bool) {
	b, err := os.ReadFile(path)
	// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return "", 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return "", 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	return f[0], pgrp, err == nil
}
