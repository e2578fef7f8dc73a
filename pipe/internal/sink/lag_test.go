package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"golang.org/x/sys/unix"
)

// memSpill is a spill file in memory, whose bytes a test may damage.
type memSpill struct{ b []byte }

func (m *memSpill) WriteAt(p []byte, off int64) (int, error) {
	if need := int(off) + len(p); need > len(m.b) {
		m.b = append(m.b, make([]byte, need-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *memSpill) ReadAt(p []byte, off int64) (int, error) {
	if int(off) >= len(m.b) {
		return 0, io.EOF
	}
	return copy(p, m.b[off:]), nil
}

// TestBacklog runs a backlog of 4-byte blocks, two of them in memory and
// a spill ring of 10 bytes, through adds (a number: that many bytes of
// the stream), takes ("t": the oldest piece is taken, written and
// released) and damage ("d": a spilled byte flips), and checks what each
// add took, where each piece taken was, what it read back, and what is
// held after each step.
func TestBacklog(t *testing.T) {
	cases := []struct {
		name  string
		steps []string
		want  []string // one for each step
	}{
		{name: "memory only", steps: []string{"3", "t"},
			want: []string{"took 3 held 3", "mem 3 ok held 0"}},
		{name: "a piece fills a block, then the next", steps: []string{"6", "t", "t"},
			want: []string{"took 6 held 6", "mem 4 ok held 2", "mem 2 ok held 0"}},
		{name: "beyond memory into the spill", steps: []string{"12", "t", "t", "t", "t"},
			want: []string{"took 12 held 12", "mem 4 ok held 8", "mem 4 ok held 4", "spill 4 ok held 0", "empty held 0"}},
		{name: "full: memory and the spill's 10 bytes", steps: []string{"20", "t", "3"},
			want: []string{"took 18 held 18", "mem 4 ok held 14", "took 3 held 17"}},
		{name: "the spill wraps round its end", steps: []string{"18", "t", "t", "t", "t", "t", "8", "t", "t", "t", "t"},
			want: []string{"took 18 held 18", "mem 4 ok held 14", "mem 4 ok held 10", "spill 4 ok held 6", "spill 4 ok held 2", "spill 2 ok held 0",
				"took 8 held 8", "mem 4 ok held 4", "mem 4 ok held 0", "empty held 0", "empty held 0"}},
		{name: "memory freed while spilled: order kept", steps: []string{"10", "t", "4", "t", "t", "t", "t"},
			want: []string{"took 10 held 10", "mem 4 ok held 6", "took 4 held 10", "mem 4 ok held 6", "spill 2 ok held 4", "mem 4 ok held 0", "empty held 0"}},
		{name: "a damaged spill is loud", steps: []string{"12", "t", "t", "d", "t"},
			want: []string{"took 12 held 12", "mem 4 ok held 8", "mem 4 ok held 4", "damaged", "spill 4 differ held 4"}},
		{name: "no spill", steps: []string{"9", "t", "9"},
			want: []string{"took 8 held 8", "mem 4 ok held 4", "took 4 held 8"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spill := &memSpill{}
			size := int64(10)
			if tc.name == "no spill" {
				size = 0
			}
			b := &backlog{block: 4, maxBlocks: 2, spillSize: size, open: func() (spillFile, error) { return spill, nil }}
			var in, out bytes.Buffer // the stream added, and as read back
			next := byte(0)
			for i, step := range tc.steps {
				var got string
				switch step {
				case "t":
					got = takeOne(b, &out)
				case "d":
					spill.b[len(spill.b)-1] ^= 1
					got = "damaged"
				default:
					var n int
					fmt.Sscan(step, &n)
					p := make([]byte, n)
					for j := range p {
						p[j], next = next, next+1
					}
					m, err := b.add(p)
					if err != nil {
						t.Fatal(err)
					}
					in.Write(p[:m])
					next -= byte(n - m)
					got = fmt.Sprintf("took %d held %d", m, b.held)
				}
				if got != tc.want[i] {
					t.Errorf("step %d (%s): %s, want %s", i, step, got, tc.want[i])
				}
			}
			if !strings.Contains(tc.name, "damaged") && !bytes.HasPrefix(in.Bytes(), out.Bytes()) {
				t.Errorf("read back % x, want a prefix of % x", out.Bytes(), in.Bytes())
			}
		})
	}
}

// takeOne takes the oldest piece, reads it to out and releases it, and
// says what it was.
func takeOne(b *backlog, out *bytes.Buffer) string {
	p := b.take()
	if p == nil {
		return fmt.Sprintf("empty held %d", b.held)
	}
	where := "mem"
	if p.buf == nil {
		where = "spill"
	}
	data, err := b.read(p, make([]byte, b.block))
	if err != nil {
		if !strings.Contains(err.Error(), "differ from those written") {
			return err.Error()
		}
		return fmt.Sprintf("%s %d differ held %d", where, p.n, b.held)
	}
	out.Write(data)
	b.release(p)
	return fmt.Sprintf("%s %d ok held %d", where, p.n, b.held)
}

// TestLag: payloads written to a Lag whose output takes nothing yet are
// held, in memory and spilled, up to the bound; past it Leave fails with
// ErrBehind and without it the write waits for the output; End gives the
// output everything, exact, and Close reports what it took.
func TestLag(t *testing.T) {
	stream := make([]byte, 100<<10)
	for i := range stream {
		stream[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name  string
		spill int64
		leave bool
	}{{"leaves, no spill", 0, true}, {"leaves, spilled", 32 << 10, true}, {"waits, spilled", 32 << 10, false}} {
		t.Run(tc.name, func(t *testing.T) {
			g := testutil.NewHeldWriter()
			l := NewLag(context.Background(), g, LagConfig{Memory: 48 << 10, Spill: tc.spill, Dir: t.TempDir(), Block: 8 << 10, Leave: tc.leave})
			// Five blocks of 8 KiB (a sixth reads the spill back), and the
			// spill; the block the drainer took may be part full.
			bound, least := int(40<<10+tc.spill), int(32<<10+tc.spill)
			if !tc.leave {
				go func() {
					// The output begins to take once the lag is full: the
					// write that waits for room goes on.
					testutil.WaitFor(t, 30*time.Second, "the lag to fill", func() bool { held, _, _ := l.Backlog(); return held >= int64(least) })
					close(g.Release)
				}()
			}
			written := 0
			for off := 0; off < len(stream); off += 4 << 10 {
				l.Start(off, stream[off:off+4<<10])
				w := l.Oldest()
				if w.Err != nil {
					if !tc.leave || !errors.Is(w.Err, ErrBehind) || written < least || written > bound {
						t.Fatalf("after %d bytes: %v", written, w.Err)
					}
					break
				}
				written += w.N
				l.Retire()
			}
			if tc.leave {
				if written == len(stream) {
					t.Fatal("the lag held the whole stream past its bound")
				}
				close(g.Release)
			}
			if err := l.End(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(g.Out.Bytes(), stream[:written]) {
				t.Errorf("the output got %d bytes, want the %d written, exact", len(g.Out.Bytes()), written)
			}
			if got := l.Close(0); got != int64(written) {
				t.Errorf("Close = %d, want %d", got, written)
			}
			_, _, spilled := l.Backlog()
			if (spilled > 0) != (tc.spill > 0) {
				t.Errorf("%d bytes spilled with a spill of %d", spilled, tc.spill)
			}
		})
	}
}

// TestLagLoans writes a stream through a Lag in front of a pipe, from
// four receive buffers that are overwritten as soon as each write is
// retired, as a receiver re-posts them: read as it comes, with a grace
// long enough for any reader, the pipe takes every payload straight from
// its buffer (nothing is held in the lag); read only once the stream was
// written, with no grace (a receiver's), the lag copies what the pipe had
// not taken of each buffer due back, and the whole stream is taken while
// nothing reads. Either way the output is exact.
func TestLagLoans(t *testing.T) {
	t.Parallel()
	stream := make([]byte, 4<<20)
	for i := range stream {
		stream[i] = byte(i*13 + i>>11)
	}
	for _, stalled := range []bool{false, true} {
		t.Run(map[bool]string{false: "read at once", true: "read late"}[stalled], func(t *testing.T) {
			t.Parallel()
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			got := make(chan []byte, 1)
			read := make(chan struct{})
			go func() {
				<-read
				b := make([]byte, len(stream)+1)
				n, _ := io.ReadFull(pr, b)
				got <- b[:n]
			}()
			if !stalled {
				close(read)
			}
			grace := map[bool]time.Duration{false: time.Minute, true: 0}[stalled] // 0: the receivers'
			l := NewLag(context.Background(), pw, LagConfig{Memory: 8 << 20, Block: 64 << 10, Loans: 2, Grace: grace})
			if l.Limit() != 2 {
				t.Fatalf("a Lag in front of a pipe takes %d writes at once, want its 2 loans", l.Limit())
			}
			feedLag(t, l, stream, 64<<10, 4)
			if stalled {
				close(read)
			}
			if err := l.End(); err != nil {
				t.Fatal(err)
			}
			pw.Close()
			if b := <-got; !bytes.Equal(b, stream) {
				t.Errorf("the pipe gave %d bytes, want the %d of the stream, exact", len(b), len(stream))
			}
			if _, peak, _ := l.Backlog(); stalled != (peak > 0) {
				t.Errorf("the lag held %d bytes at most, read late %v: want some only when read late", peak, stalled)
			}
		})
	}
}

// feedLag starts the payloads of stream, chunk bytes each, on l from bufs
// receive buffers in turn, retiring as a receiver does (Hurry where the
// oldest write has not finished) and overwriting each buffer once its
// write is retired.
func feedLag(t *testing.T, l *Lag, stream []byte, chunk, bufs int) {
	t.Helper()
	recv := make([][]byte, bufs)
	for i := range recv {
		recv[i] = make([]byte, chunk)
	}
	retire := func() {
		w := l.Oldest()
		select {
		case <-w.Done:
		default:
			l.Hurry()
			<-w.Done
		}
		if w.Err != nil || w.N != chunk {
			t.Fatalf("a write of %d bytes: %d, %v", chunk, w.N, w.Err)
		}
		l.Retire()
		for i := range recv[w.Buf] {
			recv[w.Buf][i] = 0xee // the buffer is posted again, and taken
		}
	}
	for i, off := 0, 0; off < len(stream); i, off = i+1, off+chunk {
		if l.Pending() >= l.Limit() {
			retire()
		}
		buf := i % bufs
		copy(recv[buf], stream[off:])
		l.Start(buf, recv[buf])
	}
	for l.Pending() > 0 {
		retire()
	}
}

// TestLagCloseStopsALoan closes a Lag whose loan waits on a pipe that no
// one reads: Close returns, without a reader, the bytes the pipe took,
// and the loan's write fails, so that its receive buffer is free.
func TestLagCloseStopsALoan(t *testing.T) {
	t.Parallel()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	l := NewLag(context.Background(), pw, LagConfig{Memory: 8 << 20, Block: 4 << 20, Loans: 1, Grace: time.Minute})
	p := make([]byte, 4<<20) // more than the pipe holds
	l.Start(0, p)
	w := l.Oldest()
	testutil.WaitFor(t, time.Minute, "the pipe to take part of the loan", func() bool {
		n, _ := unix.IoctlGetInt(int(pr.Fd()), unix.TIOCINQ)
		return n > 0
	})
	taken := l.Close(0)
	select {
	case <-w.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loan's write went on after Close")
	}
	if w.Err == nil || int64(w.N) != taken || taken <= 0 || taken >= int64(len(p)) {
		t.Errorf("after Close: the loan wrote %d bytes (%v), Close says the pipe took %d: want the same part of %d, and an error", w.N, w.Err, taken, len(p))
	}
}

// TestGraceFor: Hurry waits for the pipe as long as copying what is left
// of a loan would take, at the rate of the lag's copies so far, or
// LagConfig.Grace where it is set.
func TestGraceFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		grace time.Duration
		bytes int64
		took  time.Duration
		left  int
		want  time.Duration
	}{
		{"before any copy: at copyRate", 0, 0, 0, copyRate / 1024, time.Second / 1024},
		{"nothing left", 0, 4 << 20, time.Millisecond, 0, 0},
		{"at the copies' rate", 0, 4 << 20, 2 * time.Millisecond, 1 << 20, 500 * time.Microsecond},
		{"slow copies: longer", 0, 1 << 20, 4 * time.Millisecond, 4 << 20, 16 * time.Millisecond},
		{"set: whatever the copies", time.Minute, 4 << 20, time.Millisecond, 1 << 20, time.Minute},
	} {
		l := &Lag{cfg: LagConfig{Grace: c.grace}, copyBytes: c.bytes, copyTime: c.took}
		if got := l.graceFor(c.left); got != c.want {
			t.Errorf("%s: graceFor(%d) = %v, want %v", c.name, c.left, got, c.want)
		}
	}
}
