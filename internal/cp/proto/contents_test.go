package proto

import "testing"

// TestContentsIsZero checks that any field set, even an empty Names, makes
// a download's request describe a destination.
func TestContentsIsZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Contents
		want bool
	}{
		{"none", Contents{}, true},
		{"mode", Contents{Mode: ModeTar}, false},
		{"name", Contents{Name: "f"}, false},
		{"perm", Contents{Perm: 0o600}, false},
		{"atime", Contents{ATime: 1}, false},
		{"mtime", Contents{MTime: 1}, false},
		{"single", Contents{Single: true}, false},
		{"empty names", Contents{Names: []string{}}, false},
		{"size", Contents{Size: 1}, false},
		{"changed", Contents{Changed: 1}, false},
	} {
		if got := tc.c.isZero(); got != tc.want {
			t.Errorf("%s: isZero = %v, want %v", tc.name, got, tc.want)
		}
	}
}
