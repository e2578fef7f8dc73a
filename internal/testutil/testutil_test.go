package testutil

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// fatalTB records what a test would fail with and stops the goroutine
// calling Fatalf, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestWaitForHolds(t *testing.T) {
	calls := 0
	WaitFor(t, 10*time.Second, "the fifth call", func() bool {
		calls++
		return calls == 5
	})
	if calls != 5 {
		t.Errorf("cond called %d times, want 5", calls)
	}
}

func TestWaitForGivesUp(t *testing.T) {
	f := &fatalTB{TB: t}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitFor(f, 20*time.Millisecond, "nothing", func() bool { return false })
	}()
	<-done
	if want := "gave up waiting 20ms for nothing"; f.msg != want {
		t.Errorf("failed with %q, want %q", f.msg, want)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("gave up after %v, before the limit", d)
	}
}

func TestFreePort(t *testing.T) {
	port := FreePort(t)
	if port < 10000 || port > 65535 {
		t.Fatalf("port %d, want one from 10000 below the ephemeral range", port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen on the free port: %v", err)
	}
	l.Close()
}

// TestFreePortNeverRepeats: a port handed out once is not handed out
// again, even when nothing holds it for TCP (an rdma_cm listener holds its
// port where the TCP check cannot see it).
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		port := FreePort(t)
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}

// TestFreePortClaimed: a port whose file another process holds the lock
// of (here another open file, which flock tells apart alike) is not
// handed out; once the lock is gone, it is.
func TestFreePortClaimed(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", ":0") // a port free for TCP, the kernel's choice
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	other, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if take(dir, port) {
		t.Fatalf("port %d handed out while another holds its lock", port)
	}
	other.Close()
	if !take(dir, port) {
		t.Fatalf("port %d not handed out once its lock was gone", port)
	}
}

// TestPaceReference prints how long spin takes here, against refSpin; run
// it in the idle SoftRoCE VM to set refSpin.
func TestPaceReference(t *testing.T) {
	t0 := time.Now()
	spin()
	t.Logf("spin took %v here; refSpin is %v; Bound(10s) = %v", time.Since(t0), refSpin, Bound(10*time.Second))
	if Bound(time.Second) < time.Second {
		t.Fatalf("Bound(1s) = %v: a bound never shrinks", Bound(time.Second))
	}
}

// TestBuildKey: the key of Commands' build changes with a file that goes
// into a command and with race, not with a test file.
func TestBuildKey(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := func(race bool) string {
		t.Helper()
		k, err := buildKey(root, race)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	write("go.sum", "")
	write("cmd/x/main.go", "package main\n\nfunc main() {}\n")
	k0 := key(false)
	if k := key(false); k != k0 {
		t.Fatalf("two keys of the same sources: %s, %s", k0, k)
	}
	if key(true) == k0 {
		t.Error("the key does not change with race")
	}
	write("cmd/x/main_test.go", "package main\n")
	if k := key(false); k != k0 {
		t.Error("the key changes with a test file")
	}
	write("cmd/x/main.go", "package main\n\nfunc main() { println() }\n")
	if key(false) == k0 {
		t.Error("the key does not change with a command's source")
	}
}
