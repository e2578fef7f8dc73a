package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteTemp writes b to a new file name in dir and returns it open, to be
// closed when the test ends.
func WriteTemp(t testing.TB, dir, name string, b []byte) *os.File {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
