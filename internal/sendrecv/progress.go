package sendrecv

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/progress"
)

// progressEvery is the shortest time between two redraws.
const progressEvery = 200 * time.Millisecond

// progressBar is the width of the bar between its brackets.
const progressBar = 20

// newProgress returns the -p progress line on w for a stream of size
// bytes (-1 if unknown: then it shows bytes and rates without a bar or
// time left), redrawn in place at most every progressEvery. (It replaced
// github.com/schollz/progressbar/v3, which brought net/http and
// crypto/tls into every start of both commands: issue 18.)
func newProgress(w io.Writer, size int64, desc string) *progress.Meter {
	return newProgressClock(w, size, desc, time.Now)
}

// newProgressClock is newProgress on the clock now.
func newProgressClock(w io.Writer, size int64, desc string, now func() time.Time) *progress.Meter {
	return progress.New(progress.Config{W: w, Every: progressEvery, Now: now, Format: func(s progress.Sample) string {
		return progressLine(s, size, desc)
	}})
}

// progressLine is the line for s, of a stream of size bytes (-1:
// unknown): the average rate since the start in its description, then,
// with a size, the percentage, a bar and the size, then the bytes so far,
// the current rate and, with a size, the time left.
func progressLine(s progress.Sample, size int64, desc string) string {
	var b strings.Builder
	if s.Elapsed >= progressEvery || !s.First {
		fmt.Fprintf(&b, "%s (average %.1f MB/s)", desc, rate(s.N, s.Elapsed))
	} else {
		fmt.Fprintf(&b, "%s (average - MB/s)", desc)
	}
	if size > 0 {
		done := min(s.N, size)
		fill := int(done * progressBar / size)
		fmt.Fprintf(&b, " %3d%% [%s%s] %s / %s", done*100/size,
			strings.Repeat("#", fill), strings.Repeat(" ", progressBar-fill), progress.Bytes(s.N), progress.Bytes(size))
	} else {
		fmt.Fprintf(&b, " %s", progress.Bytes(s.N))
	}
	if s.Rate > 0 {
		fmt.Fprintf(&b, ", %.1f MB/s", s.Rate/1e6)
	} else {
		b.WriteString(", - MB/s")
	}
	if size > 0 && s.Rate > 0 && s.N < size {
		left := time.Duration(float64(size-s.N) / s.Rate * float64(time.Second))
		fmt.Fprintf(&b, ", %s left", left.Round(time.Second))
	}
	return b.String()
}
