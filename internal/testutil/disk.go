package testutil

import (
	"syscall"
	"testing"
)

// Allocated returns the room the file at path takes on disk: its
// allocated blocks, which holes do not count in.
func Allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
