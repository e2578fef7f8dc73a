package rdma

import (
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestDeviceOptions checks what Options.Device says about devices: which it
// allows, whether it stripes over several, and how many lanes a dialer asks
// for.
func TestDeviceOptions(t *testing.T) {
	cases := []struct {
		device    string
		qps       int
		allowed   []string
		refused   []string
		many      bool
		wantLanes int
	}{
		{"", 0, []string{"mlx5_0", "rxe0"}, nil, false, 1},
		{"", 4, []string{"mlx5_0"}, nil, false, 4},
		{"mlx5_0", 0, []string{"mlx5_0"}, []string{"mlx5_1", "mlx5"}, false, 1},
		{"mlx5_0,mlx5_1", 0, []string{"mlx5_0", "mlx5_1"}, []string{"mlx5_2", "mlx5_0,mlx5_1"}, true, 2},
		{"mlx5_0,mlx5_1", 8, []string{"mlx5_1"}, nil, true, 8},
		{"a,b,c", 40, []string{"c"}, []string{"d"}, true, maxLanes},
	}
	for _, tc := range cases {
		d := Dialer{Options{Device: tc.device, QPs: tc.qps, GIDIndex: -1}}
		for _, dev := range tc.allowed {
			if !d.allows(dev) {
				t.Errorf("Device %q refuses %s", tc.device, dev)
			}
		}
		for _, dev := range tc.refused {
			if d.allows(dev) {
				t.Errorf("Device %q allows %s", tc.device, dev)
			}
		}
		if d.manyDevices() != tc.many {
			t.Errorf("Device %q: several devices %v, want %v", tc.device, d.manyDevices(), tc.many)
		}
		if got := d.lanes(); got != tc.wantLanes {
			t.Errorf("Device %q, QPs %d: %d lanes, want %d", tc.device, tc.qps, got, tc.wantLanes)
		}
	}
}

// TestRingRequest checks the bytes a connect request adds for a ring, and
// what a listener reads from them.
func TestRingRequest(t *testing.T) {
	cases := []struct {
		write, nics bool
		lanes       int
		wantLanes   int
		wantNICs    bool
	}{
		{false, false, 1, 0, false},
		{false, true, 4, 0, false},
		{true, false, 1, 1, false},
		{true, false, 3, 3, false},
		{true, true, 2, 2, true},
		{true, true, 99, maxLanes, true},
	}
	for _, tc := range cases {
		priv := append(make([]byte, conn.ParamsLen), ringRequest(tc.write, tc.nics, tc.lanes)...)
		if got := wantsRing(priv); got != tc.wantLanes {
			t.Errorf("%+v: %d lanes asked, want %d", tc, got, tc.wantLanes)
		}
		if got := wantsNICs(priv); got != tc.wantNICs {
			t.Errorf("%+v: other devices asked %v, want %v", tc, got, tc.wantNICs)
		}
	}
}
