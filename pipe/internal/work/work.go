// Package work runs the per-message work of a stream (checksums, MACs,
// encryption: package seal) on every core, while the goroutine that hands
// it out keeps the stream's order: it queues each job where it queues the
// message, and whoever takes the message next waits for the job first.
package work

import "sync"

// Pool is a set of worker goroutines. A Pool with no workers runs every
// job on the goroutine that waits for it.
type Pool struct {
	jobs chan *Job
	wg   sync.WaitGroup
}

// Job is one piece of work, run once by a worker or by Wait.
type Job struct {
	fn     func()
	done   chan struct{}
	queued bool
}

// New returns a pool of workers goroutines (none if workers < 2: the
// goroutine that hands a job out then does it, and nothing is handed
// over) that accepts up to queue jobs at once without blocking.
func New(workers, queue int) *Pool {
	p := &Pool{}
	if workers < 2 {
		return p
	}
	p.jobs = make(chan *Job, queue)
	for range workers {
		p.wg.Go(func() {
			for j := range p.jobs {
				j.fn()
				close(j.done)
			}
		})
	}
	return p
}

// Go returns a job that runs fn: if inline is set, left for Wait to run
// on its caller's goroutine (work too small to be worth a hand-over);
// else handed to a worker, or, if the pool has none, run at once, while
// the message it reads is still in this core's cache.
func (p *Pool) Go(fn func(), inline bool) *Job {
	j := &Job{fn: fn}
	switch {
	case inline:
		return j
	case p.jobs == nil:
		fn()
		j.fn = nil
		return j
	}
	j.queued, j.done = true, make(chan struct{})
	p.jobs <- j
	return j
}

// Wait returns once the job has run.
func (j *Job) Wait() {
	if !j.queued {
		if j.fn != nil {
			j.fn()
			j.fn = nil
		}
		return
	}
	<-j.done
}

// Close waits for every job handed to the workers to run, then ends them.
// Nothing may be handed to the pool after Close.
func (p *Pool) Close() {
	if p.jobs != nil {
		close(p.jobs)
		p.wg.Wait()
	}
}
