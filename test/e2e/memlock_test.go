package e2e

import (
	"os/exec"
	"path/filepath"
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
	t.Parallel()
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
		t.Errorf("the receiver wrote %d bytes with digest %x, want %s with %x", size, got, strconv.Itoa(n), want)
	}
}

// TestRelayUnderMemlock broadcasts to three receivers that relay, each
// side run as root without CAP_IPC_LOCK under an 8 MiB locked-memory
// limit: a relay holds a connection each way and picks a window for both
// (over RDMA the default 1 MiB x 6 would lock about 11 MiB there).
func TestRelayUnderMemlock(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"prlimit", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("no %s (util-linux): this test needs it", tool)
		}
	}
	limited := []string{"prlimit", "--memlock=8388608:8388608", "--", "setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"}
	const n = 5<<20 + 3
	in, want := randomFile(t, n, 82)
	var rs []*proc
	var ports []int
	var outs []string
	for i := range 3 {
		ports = append(ports, testutil.FreePort(t))
		outs = append(outs, filepath.Join(t.TempDir(), "out"+strconv.Itoa(i)))
		rs = append(rs, startWith(t, limited, "rdmarecv", nil, createFile(t, outs[i]), flags(ports[i], "--bind", suite.host, "-v", "--relay-allow", suite.host)...))
		rs[i].waitStderr(30*time.Second, listening)
	}
	s := startWith(t, limited, "rdmasend", openFile(t, in), nil, flags(ports[0], "-v", "--wait", "20s", "--to", addrs(ports))...)
	code, stderr := s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	for i, r := range rs {
		code, stderr := r.wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i+1), code, stderr, 0)
		if got, size := fileSum(t, outs[i]); size != n || got != want {
			t.Errorf("receiver %d wrote %d bytes with digest %x, want %d with %x", i+1, size, got, n, want)
		}
	}
}
