//go:build !race

package e2e

// race is whether this test binary was built with -race (see race_test.go).
const race = false
