package testutil

import (
	"os/exec"
	"slices"
	"sync"
	"time"
)

// refSpin is how long spin took in the SoftRoCE VM (qemu TCG, 2 vCPUs) on
// the 2-CPU dev machine at a load of about 15, under which every bound of
// the quick suite held (2026-11-27: 0.81-1.21 s; 28 ms on the host).
const refSpin = 800 * time.Millisecond

// pace is measured once per test process: a bound scales with how slow the
// machine is when the tests start, not with a constant.
var pace = sync.OnceValue(measurePace)

// Bound returns limit scaled by this machine's pace: limit itself where
// it runs as fast as that VM or faster, and proportionally more where it
// runs slower (a more loaded or slower CI host).
func Bound(limit time.Duration) time.Duration {
	return time.Duration(float64(limit) * max(1, pace()))
}

// measurePace returns the median of three timings of spin against refSpin.
func measurePace() float64 {
	var runs []time.Duration
	for range 3 {
		t0 := time.Now()
		spin()
		runs = append(runs, time.Since(t0))
	}
	slices.Sort(runs)
	return float64(runs[1]) / float64(refSpin)
}

// spin starts five shells that do nothing, one after another: what the
// tests wait for is mostly processes starting, page faults and system
// calls, which emulation and load slow down far more than arithmetic.
func spin() {
	for range 5 {
		exec.Command("/bin/sh", "-c", ":").Run()
	}
}
