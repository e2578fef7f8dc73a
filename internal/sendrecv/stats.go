package sendrecv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/progress"
	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe"
)

// statsLine is one --stats-interval report.
type statsLine struct {
	Role     string  `json:"role"`
	Seconds  float64 `json:"t"`         // since the reports began
	Bytes    int64   `json:"bytes"`     // so far
	MiBps    float64 `json:"mib_per_s"` // over the last interval
	AvgMiBps float64 `json:"avg_mib_per_s"`
	InFlight int64   `json:"in_flight"` // sender: credits in use; receiver: messages waiting for the writer
	Stalls   int64   `json:"stalls"`    // sender: waits for a credit; receiver: arrivals that found the writer busy
	Lag      int64   `json:"lag"`       // receiver in a chain: bytes its output has yet to take (pipe.Gauges.Lag)
}

// human is the line -v prints instead of JSON.
func (s statsLine) human(name string) string {
	line := fmt.Sprintf("%s: %7.1f s %s, %.1f MiB/s now, %.1f MiB/s average, %d in flight, %d stalls",
		name, s.Seconds, progress.Bytes(s.Bytes), s.MiBps, s.AvgMiBps, s.InFlight, s.Stalls)
	if s.Lag > 0 {
		line += ", output " + progress.Bytes(s.Lag) + " behind"
	}
	return line
}

// reportStats writes a statsLine for g to w every interval until ctx ends:
// JSON, or a human line if human is set.
func reportStats(ctx context.Context, w io.Writer, name, role string, g *pipe.Gauges, every time.Duration, human bool) {
	t := time.NewTicker(every)
	defer t.Stop()
	start, last, lastBytes := time.Now(), time.Now(), int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s := statsLine{Role: role, Seconds: round(now.Sub(start).Seconds(), 3), Bytes: g.Bytes(), InFlight: g.InFlight(), Stalls: g.Stalls(), Lag: g.Lag()}
			s.MiBps = round(units.MiBps(s.Bytes-lastBytes, now.Sub(last).Seconds()), 1)
			s.AvgMiBps = round(units.MiBps(s.Bytes, now.Sub(start).Seconds()), 1)
			last, lastBytes = now, s.Bytes
			if human {
				fmt.Fprintln(w, s.human(name))
				continue
			}
			b, _ := json.Marshal(s)
			fmt.Fprintf(w, "%s\n", b)
		}
	}
}

// startStats starts reportStats for o's --stats-interval, if set, and
// returns the function that stops it; without the flag it does nothing.
func startStats(o options, w io.Writer, name, role string, g *pipe.Gauges) (stop func()) {
	if o.statsEvery <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reportStats(ctx, w, name, role, g, o.statsEvery, o.verbose)
	}()
	return func() {
		cancel()
		<-done
	}
}

// round rounds x to digits decimals.
func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
