package e2e

import (
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestChunkUnderMemlock streams with --chunk-size 8K on both sides, each
// run as a user whose locked memory is limited to 64 KiB and who may not
// lift it: the depth is chosen to fit, so the buffers register over RDMA
// (a sender registering 68 KiB used to fail here).
func TestChunkUnderMemlock(t *testing.T) {
	for _, tool := range []string{"prlimit", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Unmet(t, "no %s", tool)
		}
	}
	limited := []string{"prlimit", "--memlock=65536:65536", "--", "setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"}
	const n = 1<<20 + 7
	in, want := randomFile(t, n, 81)
	out := t.TempDir() + "/out"
	port := testutil.FreePort(t)
	r := startWith(t, limited, "rdmarecv", nil, createFile(t, out), flags(port, "--bind", suite.host, "-v", "--chunk-size", "8K")...)
	r.waitStderr(30*time.Second, listening)
	s := startWith(t, limited, "rdmasend", openFile(t, in), nil, append(flags(port, "-v", "--chunk-size", "8K", "--wait", "20s"), suite.host)...)
	code, stderr := s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0, "chunk 8 KiB")
	code, stderr = r.wait(time.Minute)
	expect(t, "rdmarecv", code, stderr, 0)
	if got, size := fileSum(t, out); size != n || got != want {
		t.Errorf("the receiver wrote %d bytes with sha256 %x, want %s with %x", size, got, strconv.Itoa(n), want)
	}
}
