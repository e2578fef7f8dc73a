package testutil

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Xattrs returns the extended attributes of the file at p, not following
// a link, in name order: " name=value" each, the value in hex.
func Xattrs(t testing.TB, p string) string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		t.Fatalf("list xattrs of %s: %v", p, err)
	}
	names := strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00")
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		if name == "" {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			t.Fatalf("xattr %s of %s: %v", name, p, err)
		}
		fmt.Fprintf(&b, " %s=%x", name, v[:m])
	}
	return b.String()
}
