package rdma

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPortTuning reads ports' rates from a fake sysfs tree and checks the
// queue pairs and RDMA WRITE size each rate picks.
func TestPortTuning(t *testing.T) {
	root := t.TempDir()
	cases := []struct {
		dev, rate string // rate "": no rate file
		want      tuning
	}{
		{"rxe0", "10 Gb/sec (1X QDR)", tuning{qps: 1, gbps: 10}},
		{"mlx5_0", "100 Gb/sec (4X EDR)", tuning{qps: 1, gbps: 100}},
		{"mlx5_1", "2.5 Gb/sec (1X SDR)", tuning{qps: 1, gbps: 2.5}},
		{"mlx5_2", "200 Gb/sec (4X HDR)", tuning{qps: 4, write: 128 << 10, gbps: 200}},
		{"mlx5_3", "200 Gb/sec (2X NDR)", tuning{qps: 4, write: 128 << 10, gbps: 200}},
		{"mlx5_4", "400 Gb/sec (4X NDR)", tuning{qps: 8, write: 128 << 10, gbps: 400}},
		{"mlx5_5", "800 Gb/sec (4X XDR)", tuning{qps: 8, write: 128 << 10, gbps: 800}},
		{"bnxt_re0", "199 Gb/sec", tuning{qps: 1, gbps: 199}},
		{"odd0", "fast", tuning{qps: 1}},
		{"odd1", "400 Mb/sec", tuning{qps: 1}},
		{"odd2", "-5 Gb/sec", tuning{qps: 1}},
		{"none0", "", tuning{qps: 1}},
	}
	for _, tc := range cases {
		dir := filepath.Join(root, tc.dev, "ports", "1")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if tc.rate != "" {
			if err := os.WriteFile(filepath.Join(dir, "rate"), []byte(tc.rate+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range cases {
		if got := portTuning(root, tc.dev, 1); got != tc.want {
			t.Errorf("%s at %q: %+v, want %+v", tc.dev, tc.rate, got, tc.want)
		}
	}
	if got := portTuning(root, "mlx5_4", 2); got != (tuning{qps: 1}) {
		t.Errorf("a port without a directory: %+v, want one queue pair", got)
	}
}
