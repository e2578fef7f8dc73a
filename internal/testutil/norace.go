//go:build !race

package testutil

// Race is whether this binary was built with -race (see race.go).
const Race = false
