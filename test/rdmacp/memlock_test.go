package rdmacp

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
)

// memlock is the locked-memory limit of TestUnderMemlock: 8 MiB, what
// many containers and distributions give a process.
const memlock = 8 << 20

// TestUnderMemlock copies a file up, down and to three hosts (two of them
// relays, which hold a connection each way) with every side run as root
// without CAP_IPC_LOCK under an 8 MiB locked-memory limit, as in a
// container: each side picks a window that fits, and over RDMA the one
// the stream used locks no more than the limit. rdmacp used to propose
// 4 MiB x 8 for any root, and failed to register its buffers (exit 3).
func TestUnderMemlock(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"prlimit", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("no %s (util-linux): this test needs it", tool)
		}
	}
	limited := []string{"prlimit", fmt.Sprintf("--memlock=%d:%d", memlock, memlock), "--",
		"setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"}
	prlimit, _ := exec.LookPath("prlimit")
	s := startSSHD(t)
	t.Cleanup(func() { noStrays(t) }) // after the parallel subtests
	name := filepath.Join(t.TempDir(), "f")
	makeFile(t, name, 5<<20+17, false)
	remote := strings.Join(append(limited, bin), " ")
	cases := []struct {
		name     string
		from, to func(dst string) string
	}{
		{"upload", func(string) string { return name }, func(dst string) string { return "target:" + dst }},
		{"download", func(string) string { return "target:" + name }, func(dst string) string { return dst }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := filepath.Join(t.TempDir(), "copy")
			cmd := s.command(t, "-v", "--remote-cmd", remote, tc.from(dst), tc.to(dst))
			cmd.Path, cmd.Args = prlimit, append(append([]string{}, limited...), cmd.Args...)
			r := finish(t, cmd)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0; stderr:\n%s", r.code, r.stderr)
			}
			if hashFile(t, name) != hashFile(t, dst) {
				t.Fatal("the copy differs from its source")
			}
			checkWindow(t, r.stderr)
		})
	}
	t.Run("to three hosts", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, 3)
		cmd := c.ssh.command(t, "-v", "--remote-cmd", remote, "--to", strings.Join(c.names, ","), name, c.dst)
		cmd.Path, cmd.Args = prlimit, append(append([]string{}, limited...), cmd.Args...)
		r := finish(t, cmd)
		if r.code != 0 {
			t.Fatalf("exit %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		for _, dir := range c.dirs {
			if hashFile(t, name) != hashFile(t, filepath.Join(dir, "f")) {
				t.Errorf("the copy in %s differs from its source", dir)
			}
		}
	})
}

// checkWindow checks, over RDMA, that the window in rdmacp -v's summary
// locks at most memlock on either side.
func checkWindow(t *testing.T, stderr string) {
	t.Helper()
	m := regexp.MustCompile(`over (\w+), chunk (\d+) x depth (\d+)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no summary with the window in:\n%s", stderr)
	}
	chunk, _ := strconv.Atoi(m[2])
	depth, _ := strconv.Atoi(m[3])
	t.Logf("over %s, window %d x %d", m[1], chunk, depth)
	if m[1] != harness.transport {
		t.Errorf("the copy went over %s, want %s", m[1], harness.transport)
	}
	p, o := conn.NewParams(chunk, depth), rdma.DefaultOptions()
	if locks := max(o.Pinned(p, false), o.Pinned(p, true)); m[1] == "rdma" && locks > memlock {
		t.Errorf("the window %d x %d locks %d bytes, over the limit of %d", chunk, depth, locks, memlock)
	}
}
