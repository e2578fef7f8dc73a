// Package ratelimit paces a stream's input to a rate in bytes per second
// (rdmasend and rdmacp --limit-rate): a token bucket that a Reader takes
// what it reads through.
package ratelimit

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/units"
)

// Clock is the time a Bucket keeps: the system's (System), or a test's.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends (then it returns ctx's cause).
	Sleep(ctx context.Context, d time.Duration) error
}

// System is the system's clock.
type System struct{}

// Now returns the current time.
func (System) Now() time.Time { return time.Now() }

// Sleep waits d, or until ctx ends.
func (System) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// minBurst is the least a bucket holds; maxRead is the most a Reader
// reads at once.
const (
	minBurst = 16 << 10
	maxRead  = 4 << 20
)

// A Bucket holds the bytes that may pass now: it fills at Rate bytes per
// second up to its burst (a tenth of a second's worth, at least 16 KiB),
// and whoever takes more than it holds waits until the debt is paid. Over
// any time t, at most burst + Rate*t bytes pass, and a stream held up for
// less than a tenth of a second makes up for it.
type Bucket struct {
	rate   float64 // bytes per second
	burst  float64
	tokens float64
	last   time.Time
	clock  Clock
}

// NewBucket returns a full bucket for rate bytes per second (more than 0)
// on clock.
func NewBucket(rate int64, clock Clock) *Bucket {
	burst := max(float64(rate)/10, minBurst)
	return &Bucket{rate: float64(rate), burst: burst, tokens: burst, last: clock.Now(), clock: clock}
}

// Burst is the most bytes the bucket holds.
func (b *Bucket) Burst() int { return int(b.burst) }

// Take takes n bytes from the bucket, waiting, if it goes into debt, until
// the debt is paid (or ctx ends).
func (b *Bucket) Take(ctx context.Context, n int) error {
	now := b.clock.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return nil
	}
	return b.clock.Sleep(ctx, time.Duration(math.Ceil(-b.tokens/b.rate*float64(time.Second))))
}

// Reader reads from R through the bucket B: each read returns at most B's
// burst (and 4 MiB), and only once the bucket has paid for it.
type Reader struct {
	Ctx context.Context
	R   io.Reader
	B   *Bucket
}

// Read reads from r.R and waits until r.B has paid for what it read.
func (r *Reader) Read(p []byte) (int, error) {
	if m := min(r.B.Burst(), maxRead); len(p) > m {
		p = p[:m]
	}
	n, err := r.R.Read(p)
	if n > 0 {
		if werr := r.B.Take(r.Ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// Parse parses a --limit-rate value: bytes per second, with binary K, M,
// G, T suffixes as in sizes (100M is 100 MiB/s, 1.5M 1.5 MiB/s), and a /s
// after it if one likes. 0 is refused: no limit is no --limit-rate (rsync
// and pv take 0 for no limit, scp for an error: neither is guessed here).
func Parse(s string) (int64, error) {
	n, err := units.ParseSize(trimPerSecond(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate in bytes per second (examples: 100M, 1.5G, 512K/s)", s)
	}
	if n == 0 {
		return 0, fmt.Errorf("%q: a rate must be 1 byte per second or more; for no limit leave --limit-rate out", s)
	}
	return n, nil
}

// trimPerSecond removes a trailing "/s" from s.
func trimPerSecond(s string) string {
	if len(s) > 2 && (s[len(s)-2:] == "/s" || s[len(s)-2:] == "/S") {
		return s[:len(s)-2]
	}
	return s
}

// Describe is a rate for messages: "100 MiB/s (839 Mbit/s)".
func Describe(rate int64) string {
	return fmt.Sprintf("%s/s (%.0f Mbit/s)", units.Size(rate), float64(rate)*8/1e6)
}
