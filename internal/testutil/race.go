//go:build race

package testutil

// Race is whether this binary was built with -race: then the commands
// that Commands builds are too, so that a data race in them fails the
// test that meets it (a race report exits 66).
const Race = true
