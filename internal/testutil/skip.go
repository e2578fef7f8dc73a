package testutil

import (
	"fmt"
	"os"
	"testing"
)

// StrictEnv names the variable under which a missing precondition fails a
// test instead of skipping it; make test sets it to 1.
const StrictEnv = "RDMAPIPE_STRICT"

// Unmet skips t for a precondition it lacks where it is meant to run (root,
// a tool, git history, a device), or fails it when StrictEnv is 1. A test
// meant for another place (the SoftRoCE VM, the two-host wire) skips with
// t.Skip instead, naming where it runs.
func Unmet(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if os.Getenv(StrictEnv) == "1" {
		t.Fatalf("precondition missing (%s=1 fails instead of skipping): %s", StrictEnv, why)
	}
	t.Skip(why)
}
