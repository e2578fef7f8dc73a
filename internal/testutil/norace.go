//go:build !race

package testutil

// Race is whether this binary was built with -race.
const Race = false
