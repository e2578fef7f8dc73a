package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestLimitRate sends 3 MiB with --limit-rate 1M: the stream arrives
// exact and takes at least what the rate allows (the bucket's burst, a
// tenth of a second's worth, aside), and -v says the limit. Only the
// lower bound is checked: a loaded machine is slower, never faster.
func TestLimitRate(t *testing.T) {
	t.Parallel()
	in, want := randomFile(t, 3<<20, 7)
	port := testutil.FreePort(t)
	out := filepath.Join(t.TempDir(), "output")
	r := recv(t, port, createFile(t, out))
	start := time.Now()
	s := send(t, port, openFile(t, in), "-v", "--limit-rate", "1M")
	code, stderr := s.wait(time.Minute)
	took := time.Since(start)
	expect(t, "rdmasend", code, stderr, 0, "rdmasend: sending at most 1 MiB/s (8 Mbit/s) (--limit-rate)", "3145728 bytes in")
	if code, stderr := r.wait(30 * time.Second); code != 0 {
		t.Fatalf("rdmarecv: exit %d: %s", code, stderr)
	}
	if got, _ := fileSum(t, out); got != want {
		t.Fatal("the output differs from the input")
	}
	if least := 29 * time.Second / 10; took < least {
		t.Fatalf("3 MiB at 1 MiB/s took %v, less than %v", took, least)
	}
}
