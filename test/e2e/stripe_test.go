package e2e

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestStripeDevices streams a file from rdmasend --device rxeA,rxeC to
// rdmarecv --device rxeB,rxeD, listening on all addresses, over both wires
// of test/softroce/wire.sh (up, then second: rxeA 10.0.9.1 <-> rxeB
// 10.0.9.2 over vethA, rxeC 10.0.10.1 <-> rxeD 10.0.10.2 over vethC). The
// output must be the input, -v must name both devices of each side, and
// each wire must have carried a share of the stream. It is skipped unless
// WIRE2_B (wire.sh second) is set.
func TestStripeDevices(t *testing.T) {
	w := needWire(t)
	if os.Getenv("WIRE2_B") == "" {
		t.Skip("no second wire (WIRE2_B): run wire.sh second in the SoftRoCE VM (make test-rdma)")
	}
	in, want := faultInput(t)
	out := filepath.Join(t.TempDir(), "output")
	port := strconv.Itoa(testutil.FreePort(t))
	r := start(t, "rdmarecv", nil, createFile(t, out), "--transport", "rdma", "--port", port, "--device", "rxeB,rxeD", "-v")
	r.waitStderr(30*time.Second, listening)
	txA, txC := txBytes(t, "vethA"), txBytes(t, "vethC")
	s := start(t, "rdmasend", openFile(t, in), io.Discard, "--transport", "rdma", "--port", port, "--device", "rxeA,rxeC", "-v", w.b)
	scode, serr := s.wait(2 * time.Minute)
	rcode, rerr := r.wait(time.Minute)
	if scode != 0 || rcode != 0 {
		t.Fatalf("rdmasend exited %d, rdmarecv %d; stderr:\n%s\n%s", scode, rcode, serr, rerr)
	}
	if got, n := fileSum(t, out); n != faultSize || got != want {
		t.Fatalf("the receiver wrote %d bytes with digest %x, want %d with %x", n, got, faultSize, want)
	}
	if !strings.Contains(serr, "rxeA,rxeC") || !strings.Contains(rerr, "rxeB,rxeD") {
		t.Errorf("-v does not name both devices of each side; stderr:\n%s\n%s", serr, rerr)
	}
	dA, dC := txBytes(t, "vethA")-txA, txBytes(t, "vethC")-txC
	t.Logf("vethA carried %d bytes, vethC %d, of a %d-byte stream", dA, dC, faultSize)
	if dA < faultSize/3 || dC < faultSize/3 {
		t.Errorf("vethA carried %d bytes and vethC %d, want at least a third of %d each", dA, dC, faultSize)
	}
}
