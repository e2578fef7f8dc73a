package rdma

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// TestDevicesAt reads a fake sysfs tree: port facts, valid GIDs with their
// RoCE types, the transport, and the MTU query's answer per port.
func TestDevicesAt(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("rxe0/node_type", "1: CA")
	write("rxe0/ports/1/state", "4: ACTIVE")
	write("rxe0/ports/1/phys_state", "5: LinkUp")
	write("rxe0/ports/1/link_layer", "Ethernet")
	write("rxe0/ports/1/rate", "100 Gb/sec (4X EDR)")
	write("rxe0/ports/1/gids/0", "fe80:0000:0000:0000:0000:0000:0000:0001")
	write("rxe0/ports/1/gid_attrs/types/0", "IB/RoCE v1")
	write("rxe0/ports/1/gid_attrs/ndevs/0", "dummy0")
	write("rxe0/ports/1/gids/1", "fe80:0000:0000:0000:0000:0000:0000:0001")
	write("rxe0/ports/1/gid_attrs/types/1", "RoCE v2")
	write("rxe0/ports/1/gid_attrs/ndevs/1", "dummy0")
	write("rxe0/ports/1/gids/2", "0000:0000:0000:0000:0000:0000:0000:0000")
	write("mlx5_0/node_type", "1: CA")
	write("mlx5_0/ports/1/state", "1: DOWN")
	write("mlx5_0/ports/1/link_layer", "InfiniBand")
	write("iw0/node_type", "4: RNIC")
	write("iw0/ports/1/link_layer", "Ethernet")

	mtu := func(dev string, port int) (int, int, error) {
		if dev == "mlx5_0" {
			return 0, 0, errors.New("no provider")
		}
		return 1024, 4096, nil
	}
	devs, err := devicesAt(root, mtu)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Device{}
	for _, d := range devs {
		got[d.Name] = d
	}
	rxe := got["rxe0"]
	if rxe.Transport != "RoCE" || len(rxe.Ports) != 1 {
		t.Fatalf("rxe0 = %+v", rxe)
	}
	p := rxe.Ports[0]
	gid := netip.MustParseAddr("fe80::1")
	want := []GID{{0, gid, "IB/RoCE v1", "dummy0"}, {1, gid, "RoCE v2", "dummy0"}}
	if !p.Active() || p.PhysState != "LinkUp" || p.ActiveMTU != 1024 || p.MaxMTU != 4096 || p.Rate != "100 Gb/sec (4X EDR)" || len(p.GIDs) != 2 || p.GIDs[0] != want[0] || p.GIDs[1] != want[1] {
		t.Errorf("rxe0 port 1 = %+v", p)
	}
	if m := got["mlx5_0"]; m.Transport != "InfiniBand" || m.Ports[0].Active() || m.Ports[0].MTUErr == nil {
		t.Errorf("mlx5_0 = %+v", m)
	}
	if got["iw0"].Transport != "iWARP" {
		t.Errorf("iw0 = %+v", got["iw0"])
	}
	if devs, err := devicesAt(filepath.Join(root, "missing"), mtu); err != nil || len(devs) != 0 {
		t.Errorf("no sysfs dir: %v, %v; want none, nil", devs, err)
	}
}
