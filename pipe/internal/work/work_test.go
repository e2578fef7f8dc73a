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
