package rdmacp

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// harness is where the tests copy. On the host (the default) they copy
// over TCP through an sshd in a network namespace of their own, else on
// loopback. Inside the SoftRoCE VM test/softroce/run-suite.sh sets:
//
//	RDMAPIPE_CP_TRANSPORT  rdmacp's --transport on the local side, which the
//	                       remote side listens with too (default tcp)
//	RDMAPIPE_CP_HOST       the address sshd listens on, in this namespace (no
//	                       namespace of its own): the remote side listens
//	                       there and the local side connects there; over
//	                       rdma an RDMA device's (rdma_cm cannot reach
//	                       127.0.0.1)
//	RDMAPIPE_CP_DEVICE     the RDMA device of that address, whose packet
//	                       counters TestTransport watches (rxe has them)
//	RDMAPIPE_BIN           a directory holding a prebuilt rdmacp (nothing is
//	                       compiled in the VM)
var harness = struct{ transport, host, device string }{
	transport: getenv("RDMAPIPE_CP_TRANSPORT", "tcp"),
	host:      os.Getenv("RDMAPIPE_CP_HOST"),
	device:    os.Getenv("RDMAPIPE_CP_DEVICE"),
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// TestTransport proves the stream took the transport the harness names:
// -v's summary says which carried it, and the RDMA device, when named,
// sent and received at least a packet per 4 KiB (its largest MTU) of it.
func TestTransport(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	const size = 3 << 20
	name := filepath.Join(t.TempDir(), "f")
	makeFile(t, name, size, false)
	before := counters(t)
	r := s.rdmacp(t, "-v", name, "target:"+t.TempDir()+"/")
	over := "over " + harness.transport + ","
	if r.code != 0 || !strings.Contains(r.stderr, strconv.Itoa(size)+" bytes in") || !strings.Contains(r.stderr, over) {
		t.Fatalf("exit %d, want 0 and a summary saying %q: %s", r.code, over, r.stderr)
	}
	t.Logf("rdmacp said: %s", r.stderr)
	if harness.device == "" {
		return
	}
	after := counters(t)
	for i, c := range []string{"sent_pkts", "rcvd_pkts"} {
		d := after[i] - before[i]
		if d < size/4096 {
			t.Errorf("%s's %s grew by %d during the copy, want %d at least", harness.device, c, d, size/4096)
		}
		t.Logf("%s's %s grew by %d", harness.device, c, d)
	}
}

// counters returns the packets harness.device has sent and received
// (port 1's hw_counters), or nothing when no device is named.
func counters(t *testing.T) (n [2]int64) {
	t.Helper()
	if harness.device == "" {
		return n
	}
	for i, c := range []string{"sent_pkts", "rcvd_pkts"} {
		b, err := os.ReadFile(filepath.Join("/sys/class/infiniband", harness.device, "ports/1/hw_counters", c))
		if err != nil {
			t.Fatalf("RDMAPIPE_CP_DEVICE=%s: %v", harness.device, err)
		}
		if n[i], err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			t.Fatalf("%s's %s: %v", harness.device, c, err)
		}
	}
	return n
}

// TestQuietCopy copies with the default transport (auto), a file up, a
// tree up and a file down, and checks that a copy that works prints
// nothing on stderr without -v (as scp), on a host without RDMA (where
// auto takes TCP) as on one with it.
func TestQuietCopy(t *testing.T) {
	s := startSSHD(t)
	src, dst := t.TempDir(), t.TempDir()
	name := filepath.Join(src, "f")
	makeFile(t, name, 1<<20, false)
	for _, args := range [][]string{
		{name, "target:" + dst + "/"},
		{"-r", src, "target:" + dst + "/tree"},
		{"target:" + name, filepath.Join(dst, "down")},
	} {
		r := s.rdmacp(t, append([]string{"-t", "auto"}, args...)...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("rdmacp %s: exit %d, want 0 and nothing on stderr; stderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if a, b := hashFile(t, name), hashFile(t, filepath.Join(dst, "down")); a != b {
		t.Errorf("the download differs from its source")
	}
}
