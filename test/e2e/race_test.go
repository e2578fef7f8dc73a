//go:build race

package e2e

// race is whether this test binary was built with -race: then the
// binaries it builds are too, so that a data race in them fails the test
// that meets it (a race report exits 66).
const race = true
