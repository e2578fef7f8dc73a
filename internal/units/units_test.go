package units

import "testing"

func TestSize(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1000, "1000 B"}, {1024, "1 KiB"}, {1536, "1536 B"}, {4 << 20, "4 MiB"}, {3 << 30, "3 GiB"}, {1<<30 + 1<<20, "1025 MiB"},
	}
	for _, tt := range tests {
		if got := Size(tt.n); got != tt.want {
			t.Errorf("Size(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
