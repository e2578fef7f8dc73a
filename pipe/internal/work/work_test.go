package work

import (
	"sync/atomic"
	"testing"
)

// TestPool checks that every job runs exactly once, on a worker or on the
// goroutine that waits for it, and that its effects are seen after Wait.
func TestPool(t *testing.T) {
	cases := []struct {
		name    string
		workers int
		inline  func(i int) bool
	}{
		{"no workers", 0, func(int) bool { return false }},
		{"one worker: runs on the waiter", 1, func(int) bool { return false }},
		{"four workers", 4, func(int) bool { return false }},
		{"four workers, every third inline", 4, func(i int) bool { return i%3 == 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := New(tc.workers, 8)
			var runs atomic.Int64
			results := make([]int, 1000)
			jobs := make(chan *Job, 8)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < len(results); i++ {
					j := <-jobs
					j.Wait()
					j.Wait() // twice: still once
					if results[i] != i*i {
						t.Errorf("job %d: result %d after Wait", i, results[i])
					}
				}
			}()
			for i := range results {
				jobs <- p.Go(func() { runs.Add(1); results[i] = i * i }, tc.inline(i))
			}
			<-done
			p.Close()
			if n := runs.Load(); n != int64(len(results)) {
				t.Errorf("%d runs of %d jobs", n, len(results))
			}
		})
	}
}

// TestPoolWithoutWorkers checks that a pool without workers runs a job
// that is not inline at once, on the goroutine that hands it out, and
// leaves an inline one for Wait.
func TestPoolWithoutWorkers(t *testing.T) {
	p := New(1, 1)
	defer p.Close()
	ran := false
	j := p.Go(func() { ran = true }, false)
	if !ran {
		t.Fatal("a job of a pool without workers had not run when Go returned")
	}
	j.Wait()
	ran = false
	j = p.Go(func() { ran = true }, true)
	if ran {
		t.Fatal("an inline job ran before Wait")
	}
	j.Wait()
	if !ran {
		t.Fatal("an inline job had not run when Wait returned")
	}
}
