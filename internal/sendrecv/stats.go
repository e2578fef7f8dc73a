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
	// Hosts is, for rdmasend --to with a key, how far behind each host
	// of the chain was in its last report (pipe.Gauges.Hosts): shown only.
	Hosts   []hostLag `json:"hosts,omitempty"`
	Refused int64     `json:"host_reports_refused,omitempty"` // host reports that failed their checks (pipe.Gauges.RefusedReports)
}

// hostLag is one host's line of a chain's host reports.
type hostLag struct {
	Place   int    `json:"place"` // 1: the first receiver
	Host    string `json:"host"`
	Behind  int64  `json:"behind_bytes"`  // what its output has yet to take
	Spilled int64  `json:"spilled_bytes"` // what went through its spill file so far
}

// String is the line -v prints for h.
func (h hostLag) String() string {
	return fmt.Sprintf("host %d (%s): behind %.1f MiB, spilled %.1f MiB", h.Place, h.Host, float64(h.Behind)/(1<<20), float64(h.Spilled)/(1<<20))
}

// hostLags names the hosts of a chain's report by their places in hosts,
// the chain's addresses in order.
func hostLags(report []pipe.HostLag, hosts []string) []hostLag {
	var out []hostLag
	for _, h := range report {
		if h.Place >= 1 && h.Place <= len(hosts) {
			out = append(out, hostLag{Place: h.Place, Host: hosts[h.Place-1], Behind: h.Behind, Spilled: h.Spilled})
		}
	}
	return out
}

// human is the line -v prints instead of JSON.
func (s statsLine) human(name string) string {
	line := fmt.Sprintf("%s: %7.1f s %s, %.1f MiB/s now, %.1f MiB/s average, %d in flight, %d stalls",
		name, s.Seconds, progress.Bytes(s.Bytes), s.MiBps, s.AvgMiBps, s.InFlight, s.Stalls)
	if s.Lag > 0 {
		line += ", output " + progress.Bytes(s.Lag) + " behind"
	}
	if s.Refused > 0 {
		line += fmt.Sprintf(", %d host reports refused", s.Refused)
	}
	for _, h := range s.Hosts {
		line += "\n" + name + ": " + h.String()
	}
	return line
}

// reportStats writes a statsLine for g to w every interval until ctx ends:
// JSON, or a human line if human is set; hosts are the addresses of a
// chain, in order, that the host reports name.
func reportStats(ctx context.Context, w io.Writer, name, role string, g *pipe.Gauges, hosts []string, every time.Duration, human bool) {
	t := time.NewTicker(every)
	defer t.Stop()
	start, last, lastBytes := time.Now(), time.Now(), int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s := statsLine{Role: role, Seconds: round(now.Sub(start).Seconds(), 3), Bytes: g.Bytes(), InFlight: g.InFlight(), Stalls: g.Stalls(), Lag: g.Lag(),
				Hosts: hostLags(g.Hosts(), hosts), Refused: g.RefusedReports()}
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
// hosts are the addresses of rdmasend's chain, in order.
func startStats(o options, w io.Writer, name, role string, g *pipe.Gauges, hosts []string) (stop func()) {
	if o.statsEvery <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reportStats(ctx, w, name, role, g, hosts, o.statsEvery, o.verbose)
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
