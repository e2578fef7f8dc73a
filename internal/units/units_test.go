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

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"65536", 65536, true},
		{"64K", 64 << 10, true},
		{"64KiB", 64 << 10, true},
		{"1m", 1 << 20, true},
		{"1MB", 1 << 20, true},
		{"2G", 2 << 30, true},
		{" 8M ", 8 << 20, true},
		{"0", 0, true},
		{"", 0, false},
		{"lots", 0, false},
		{"-1", 0, false},
		{"1.5M", 3 << 19, true},
		{"0.5K", 512, true},
		{"1.25", 1, true},
		{".5G", 1 << 29, true},
		{"1e3", 0, false},
		{"inf", 0, false},
		{"NaN", 0, false},
		{"0x10", 0, false},
		{"1.5.1M", 0, false},
		{"M", 0, false},
		{"99999999999T", 0, false},
	}
	for _, tc := range cases {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
