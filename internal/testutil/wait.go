package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds and fails t, saying it gave up
// waiting for what, if it does not hold within limit (scaled by Bound).
// It polls often at first and then less, at least every 100ms, and checks
// cond once more after the limit has passed before failing. It must be called from the
// goroutine running t, as cond may be too (it may call t.Fatal).
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	limit = Bound(limit)
	deadline := time.Now().Add(limit)
	for delay := time.Millisecond; !cond(); delay = min(2*delay, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting %v for %s", limit, what)
		}
		time.Sleep(delay)
	}
}
