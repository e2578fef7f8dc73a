package sendrecv

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/server"
	"golang.org/x/sys/unix"
)

// TestMain runs the test binary as the guard of an --exec command when
// startGuard starts it (as /proc/self/exe), one that exits at once when
// built with -race (not after GORACE's atexit_sleep_ms).
func TestMain(m *testing.M) {
	if len(os.Args) == 1 && os.Args[0] == guardName {
		os.Exit(runGuard())
	}
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
	os.Exit(m.Run())
}

// TestGuard: a byte on the control pipe lets the command's stdin go
// without a kill; the control pipe's end kills first, while the stdin is
// still held, and lets it go only after.
func TestGuard(t *testing.T) {
	for _, released := range []bool{true, false} {
		ctlR, ctlW := osPipe(t)
		r, w := osPipe(t)
		if released {
			ctlW.Write([]byte{1})
		}
		ctlW.Close()
		killed, heldAtKill := false, false
		kill := func() error {
			killed, heldAtKill = true, held(t, r)
			return nil
		}
		if err := guard(ctlR, w, kill); err != nil {
			t.Fatalf("released %v: guard: %v", released, err)
		}
		if killed == released || !released && !heldAtKill {
			t.Errorf("released %v: killed %v, the stdin still held at the kill %v", released, killed, heldAtKill)
		}
		if held(t, r) {
			t.Errorf("released %v: the guard still holds the stdin once it returned", released)
		}
	}
}

// TestGuardKillFails: a kill that fails is the guard's error.
func TestGuardKillFails(t *testing.T) {
	ctlR, ctlW := osPipe(t)
	_, w := osPipe(t)
	ctlW.Close()
	err := guard(ctlR, w, func() error { return errors.New("no") })
	if err == nil || !strings.Contains(err.Error(), "kill the command's process group: no") {
		t.Errorf("guard = %v", err)
	}
}

// osPipe returns a pipe that the test closes at its end.
func osPipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		w.Close()
	})
	return r, w
}

// held reports whether the empty pipe that r reads still has a writer:
// a read then waits instead of ending.
func held(t *testing.T, r *os.File) bool {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := r.Read(make([]byte, 1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return true
	case err == io.EOF:
		return false
	}
	t.Fatalf("read the empty pipe: %v", err)
	return false
}

// marking is a command that writes what it read to got, its byte count
// to n at the end of its stdin, and marker after: a pipeline, so that sh
// forks.
const marking = "tee got | wc -c > n && echo done > marker"

// startMarking starts marking in a directory of its own for one stream and
// returns the directory and the stream's handler.
func startMarking(t *testing.T) (string, *handler) {
	t.Helper()
	dir := t.TempDir()
	out, err := startHandler("cd "+dir+" && "+marking, server.Stream{N: 1, Remote: "peer"}, 1<<20, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return dir, out.W.(*handler)
}

// TestHandlerCommits: a whole stream reaches the command, which sees the
// end of its stdin, and its guard is gone once the stream is committed.
func TestHandlerCommits(t *testing.T) {
	dir, h := startMarking(t)
	raw, err := h.stdin.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(fd uintptr) {
		if fl, _ := unix.FcntlInt(fd, unix.F_GETFL, 0); fl&unix.O_NONBLOCK == 0 {
			t.Error("the command's stdin is blocking in rdmarecv: its writes would hold a thread each")
		}
	})
	data := bytes.Repeat([]byte("stream"), 100000)
	if _, err := h.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := h.commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := h.end(nil); err != nil {
		t.Fatalf("end after the commit: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "got")); !bytes.Equal(got, data) {
		t.Errorf("the command read %d bytes, want the %d written", len(got), len(data))
	}
	if _, err := os.Stat(filepath.Join(dir, "marker")); err != nil {
		t.Errorf("the command did not see the end of its stdin: %v", err)
	}
	select {
	case <-h.guardDone:
	default:
		t.Errorf("the guard still runs after the commit")
	}
}

// TestHandlerReceiverDies closes rdmarecv's ends of the command's stdin
// and of the control pipe, as the kernel does when rdmarecv is killed:
// the guard kills the command's group before its stdin ends.
func TestHandlerReceiverDies(t *testing.T) {
	dir, h := startMarking(t)
	if _, err := h.Write([]byte("part of a stream")); err != nil {
		t.Fatal(err)
	}
	h.ctl.Close()
	h.stdin.Close()
	h.cmd.Wait()
	<-h.guardDone
	if got := status(h.cmd.ProcessState); got != "was killed by SIGKILL" {
		t.Errorf("the command %s, want killed by SIGKILL", got)
	}
	n, _ := os.ReadFile(filepath.Join(dir, "n"))
	_, err := os.Stat(filepath.Join(dir, "marker"))
	if len(n) > 0 || err == nil {
		t.Errorf("the command saw the end of its stdin (wc -c wrote %q, marker written: %v)", n, err == nil)
	}
}

// TestHandlerGuardDies: once the guard has died, the stream fails at its
// next write, and ends as any failed stream.
func TestHandlerGuardDies(t *testing.T) {
	_, h := startMarking(t)
	h.guard.Process.Kill()
	<-h.guardDone
	_, err := h.Write([]byte("more"))
	if err == nil || !strings.Contains(err.Error(), "its guard was killed by SIGKILL") {
		t.Fatalf("write after the guard died: %v", err)
	}
	if got := h.end(err); got != err {
		t.Errorf("end = %v, want the write's error", got)
	}
	if got := status(h.cmd.ProcessState); got != "was killed by SIGTERM" {
		t.Errorf("the command %s, want killed by SIGTERM (as the end of a failed stream)", got)
	}
}
