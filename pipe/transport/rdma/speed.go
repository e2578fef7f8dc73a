package rdma

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Speed-aware defaults: a dialer that leaves Options.QPs or
// Options.MaxWrite at 0 gets them from the rate of the port rdma_cm
// resolved the peer to. Below fastLink one queue pair and a chunk per
// RDMA WRITE are enough. At fastLink and above, WRITEs of fastWrite bytes
// (a 400 Gb/s ConnectX-7 does 392 Gb/s on one queue pair with 128 KiB
// messages, but 284 Gb/s with 1 MiB ones; 391 over 8 queue pairs) over
// several queue pairs, so that a single one is not the limit either: 4,
// and 8 from 400 Gb/s.

// splitWrites is, for a sender, the most bytes of one RDMA WRITE (size 0:
// a data message per WRITE), and for a receiver the piece size the lengths
// of split messages count in (see postData); why says why, when the
// port's rate chose it.
type splitWrites struct {
	size int
	why  string
}

const (
	// fastLink is the rate, in Gb/s, from which the defaults change.
	fastLink = 200
	// fastWrite is the largest RDMA WRITE on a fast link.
	fastWrite = 128 << 10
)

// tuning is what a port's rate suggests: queue pairs, the largest RDMA
// WRITE (0: a data message per WRITE) and the rate it was read from.
type tuning struct {
	qps   int
	write int
	gbps  float64
}

// tuneFor returns the tuning for a link of gbps Gb/s (0 if unknown).
func tuneFor(gbps float64) tuning {
	switch {
	case gbps >= 2*fastLink:
		return tuning{qps: 8, write: fastWrite, gbps: gbps}
	case gbps >= fastLink:
		return tuning{qps: 4, write: fastWrite, gbps: gbps}
	}
	return tuning{qps: 1, gbps: gbps}
}

// fast reports whether the tuning departs from one queue pair and a data
// message per WRITE.
func (t tuning) fast() bool { return t.write > 0 }

// String says why, for conn.Info.Tuned.
func (t tuning) String() string { return fmt.Sprintf("a %g Gb/s link", t.gbps) }

// linkGbps parses a port's sysfs rate, e.g. "400 Gb/sec (4X NDR)" or
// "2.5 Gb/sec (1X SDR)", into Gb/s; 0 when it cannot.
func linkGbps(rate string) float64 {
	num, unit, ok := strings.Cut(rate, " ")
	if !ok || !strings.HasPrefix(unit, "Gb/sec") {
		return 0
	}
	g, err := strconv.ParseFloat(num, 64)
	if err != nil || g < 0 {
		return 0
	}
	return g
}

// portTuning returns the tuning for port of device dev, from its rate in
// the sysfs tree at root.
func portTuning(root, dev string, port int) tuning {
	return tuneFor(linkGbps(readString(filepath.Join(root, dev, "ports", strconv.Itoa(port), "rate"))))
}
