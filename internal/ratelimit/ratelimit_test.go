package ratelimit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// fakeClock is a clock whose Sleep moves its time on at once.
type fakeClock struct {
	now   time.Time
	slept time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.now = c.now.Add(d)
	c.slept += d
	return nil
}

// zeros reads as many bytes as asked for (what the buffer held).
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { return len(p), nil }

// TestReaderRate: a minute's worth of bytes at each rate, read in chunks
// of every size, takes a minute on the bucket's clock, within the burst,
// and at no point has more than burst + rate*t passed.
func TestReaderRate(t *testing.T) {
	for _, rate := range []int64{1000, 100 << 10, 100 << 20, 1 << 30} {
		for _, chunk := range []int{1, 4096, 4 << 20} {
			clock := &fakeClock{now: time.Unix(1e9, 0)}
			start := clock.now
			b := NewBucket(rate, clock)
			r := &Reader{Ctx: context.Background(), R: zeros{}, B: b}
			total := rate * 60
			if total/int64(chunk) > 200000 {
				continue // too many reads for a unit test
			}
			buf := make([]byte, chunk)
			var got int64
			for got < total {
				n, err := r.Read(buf[:min(int64(chunk), total-got)])
				if err != nil {
					t.Fatal(err)
				}
				got += int64(n)
				if limit := float64(b.Burst()) + float64(rate)*clock.now.Sub(start).Seconds(); float64(got) > limit+1 {
					t.Fatalf("rate %d, chunk %d: %d bytes after %v, more than %f", rate, chunk, got, clock.now.Sub(start), limit)
				}
			}
			took := clock.now.Sub(start)
			least := time.Duration(float64(total-int64(b.Burst())) / float64(rate) * float64(time.Second))
			if took < least-time.Millisecond || took > time.Minute+time.Millisecond {
				t.Errorf("rate %d, chunk %d: %d bytes took %v, want %v to 1m", rate, chunk, total, took, least)
			}
		}
	}
}

// TestReaderIdle: a bucket fills while nobody reads, but only up to its
// burst (a tenth of a second's worth): after an idle hour, eleven bursts
// take a second.
func TestReaderIdle(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	b := NewBucket(1<<20, clock)
	clock.now = clock.now.Add(time.Hour)
	r := &Reader{Ctx: context.Background(), R: zeros{}, B: b}
	buf := make([]byte, b.Burst())
	for i := 0; i < 11; i++ {
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
	}
	if want := time.Second; clock.slept < want-time.Millisecond || clock.slept > want+time.Millisecond {
		t.Fatalf("slept %v after an idle hour, want %v (the burst, then the rate)", clock.slept, want)
	}
}

// TestReaderMakesUp: a stream held up for less than a tenth of a second
// (here 50 ms at 1 GiB/s, the machine busy elsewhere) makes up for it, so
// that over a second it gets the whole rate; a bucket of 4 MiB, a few
// milliseconds' worth, lost what it could not hold.
func TestReaderMakesUp(t *testing.T) {
	const rate = 1 << 30
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	start := clock.now
	r := &Reader{Ctx: context.Background(), R: zeros{}, B: NewBucket(rate, clock)}
	buf := make([]byte, 1<<20)
	for got := 0; got < rate; {
		if got == rate/2 {
			clock.now = clock.now.Add(50 * time.Millisecond)
		}
		n, err := r.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if took := clock.now.Sub(start); took > time.Second {
		t.Fatalf("1 GiB at 1 GiB/s with a 50 ms hold-up took %v, want at most 1s", took)
	}
}

// TestReaderEnds: the end of the input and of the context come through.
func TestReaderEnds(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	r := &Reader{Ctx: context.Background(), R: bytes.NewReader([]byte("abc")), B: NewBucket(1, clock)}
	if b, err := io.ReadAll(r); err != nil || string(b) != "abc" {
		t.Fatalf("got %q, %v", b, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r = &Reader{Ctx: ctx, R: zeros{}, B: NewBucket(1000, clock)}
	if _, err := io.Copy(io.Discard, r); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the context's end", err)
	}
}

func TestParse(t *testing.T) {
	for s, want := range map[string]int64{"100M": 100 << 20, "1G": 1 << 30, "512K/s": 512 << 10, "1000": 1000, "1.5M": 3 << 19, "2MiB/s": 2 << 20} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "fast", "-1", "1X", "/s", "0", "0K/s", "0.4"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q): no error", s)
		}
	}
}
