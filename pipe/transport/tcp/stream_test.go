package tcp

import (
	"context"
	"fmt"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// loop streams messages from the sender to the receiver of a pair under
// credit flow control, as the engine does, with the receiver in its own
// goroutine. It allocates nothing per message itself.
type loop struct {
	s, r    conn.Conn
	size    int
	start   chan int
	done    chan error
	cs      []conn.Completion
	free    []int
	credits int
}

// newLoop starts the receiver of a loop of messages of size bytes; stop
// ends it.
func newLoop(s, r conn.Conn, size int) *loop {
	l := &loop{s: s, r: r, size: size, start: make(chan int), done: make(chan error),
		cs: make([]conn.Completion, 16), free: make([]int, 0, s.SendBufs()), credits: r.RecvBufs() - conn.SpareRecvs}
	for i := range s.SendBufs() {
		l.free = append(l.free, i)
	}
	go l.receive()
	return l
}

func (l *loop) stop() { close(l.start) }

// receive takes n messages per run, re-posting each buffer and returning
// a credit for it.
func (l *loop) receive() {
	cs := make([]conn.Completion, 16)
	credit := []byte{1}
	for n := range l.start {
		var err error
		for got := 0; got < n && err == nil; {
			var k int
			k, err = l.r.Poll(context.Background(), cs)
			for _, c := range cs[:k] {
				got++
				if err = l.r.PostRecv(c.Buf); err == nil {
					err = l.r.SendControl(context.Background(), credit)
				}
			}
		}
		l.done <- err
	}
}

// run sends n messages and waits until all are acknowledged.
func (l *loop) run(n int) error {
	l.start <- n
	sent, completed, credited := 0, 0, 0
	for completed < n || credited < n {
		for l.credits > 0 && len(l.free) > 0 && sent < n {
			if err := l.s.PostSend(l.free[len(l.free)-1], l.size); err != nil {
				return err
			}
			l.free, l.credits, sent = l.free[:len(l.free)-1], l.credits-1, sent+1
		}
		k, err := l.s.Poll(context.Background(), l.cs)
		if err != nil {
			return err
		}
		for _, c := range l.cs[:k] {
			if c.Op == conn.OpSend {
				l.free = append(l.free, c.Buf)
				completed++
				continue
			}
			if err := l.s.PostRecv(c.Buf); err != nil {
				return err
			}
			l.credits++
			credited++
		}
	}
	return <-l.done
}

// TestNoAllocations checks that streaming allocates nothing per message.
func TestNoAllocations(t *testing.T) {
	s, r, err := makePair(t, proposal, local)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer r.Close()
	l := newLoop(s, r, local.Chunk)
	defer l.stop()
	const perRun = 200
	var runErr error
	allocs := testing.AllocsPerRun(20, func() {
		if err := l.run(perRun); err != nil {
			runErr = err
		}
	})
	if runErr != nil {
		t.Fatal(runErr)
	}
	t.Logf("%.1f allocations per %d messages", allocs, perRun)
	if allocs/perRun > 0.05 {
		t.Errorf("%.2f allocations per message", allocs/perRun)
	}
}

// BenchmarkStream measures streaming throughput over loopback.
func BenchmarkStream(b *testing.B) {
	for _, chunk := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("chunk=%dKiB", chunk>>10), func(b *testing.B) {
			p := conn.NewParams(chunk, conn.DefaultDepth)
			s, r, err := makePair(b, p, p)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			defer r.Close()
			l := newLoop(s, r, conn.TrailerLen+chunk)
			defer l.stop()
			b.SetBytes(int64(chunk))
			b.ReportAllocs()
			b.ResetTimer()
			if err := l.run(b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}
