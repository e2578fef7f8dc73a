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
		d := Dialer{Options: Options{Device: tc.device, QPs: tc.qps, GIDIndex: -1}}
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
		if got := d.lanes(tuning{qps: 1}); got != tc.wantLanes {
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
		split       int
		wantLanes   int
		wantNICs    bool
		wantSplit   int
	}{
		{false, false, 1, 0, 0, false, 0},
		{false, true, 4, 128 << 10, 0, false, 0},
		{true, false, 1, 0, 1, false, 0},
		{true, false, 3, 0, 3, false, 0},
		{true, true, 2, 0, 2, true, 0},
		{true, true, 99, 0, maxLanes, true, 0},
		{true, false, 8, 128 << 10, 8, false, 128 << 10},
		{true, false, 1, 4096, 1, false, 4096},
	}
	for _, tc := range cases {
		priv := append(make([]byte, conn.ParamsLen), ringRequest(tc.write, tc.nics, tc.lanes, tc.split)...)
		if got := wantsRing(priv); got != tc.wantLanes {
			t.Errorf("%+v: %d lanes asked, want %d", tc, got, tc.wantLanes)
		}
		if got := wantsNICs(priv); got != tc.wantNICs {
			t.Errorf("%+v: other devices asked %v, want %v", tc, got, tc.wantNICs)
		}
		if got := wantsSplit(priv); got != tc.wantSplit {
			t.Errorf("%+v: pieces of %d bytes, want %d", tc, got, tc.wantSplit)
		}
	}
	// A piece size out of range is no split.
	for _, b := range []byte{0, 11, 31, 255} {
		if got := wantsSplit(append(make([]byte, conn.ParamsLen), opWrite, 1, b)); got != 0 {
			t.Errorf("shift %d: pieces of %d bytes, want none", b, got)
		}
	}
}

// TestSplit checks the piece sizes a MaxWrite rounds to, and that the
// immediate of a split message gives the receiver back its slot and
// length.
func TestSplit(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{1, 4096}, {4096, 4096}, {8191, 4096}, {128 << 10, 128 << 10}, {200 << 10, 128 << 10}, {1 << 40, 1 << 30}} {
		if got := pieceSize(tc.n); got != tc.want {
			t.Errorf("pieceSize(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct{ slot, n, piece, last int }{
		{0, 1, 4096, 1}, {3, 4096, 4096, 4096}, {3, 4097, 4096, 1}, {127, 64<<20 + 8, 4096, 8},
		{5, 4<<20 + 8, 128 << 10, 8}, {5, 4 << 20, 128 << 10, 128 << 10}, {9, 0, 4096, 0},
	} {
		slot, n := splitLen(splitImm(uint32(tc.slot), tc.n, tc.piece), tc.last, tc.piece)
		if slot != tc.slot || n != tc.n {
			t.Errorf("%+v: slot %d, %d bytes back", tc, slot, n)
		}
	}
}
