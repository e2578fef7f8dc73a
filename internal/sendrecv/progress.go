package sendrecv

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress is the -p progress line on stderr: the average rate since the
// start in its description, then, when the size is known, the percentage,
// a bar and the size, then the bytes so far, the current rate (over the
// last redraws) and, with a size, the time left. It is redrawn in place
// (carriage return) at most every progressEvery. It replaced
// github.com/schollz/progressbar/v3, which brought net/http and
// crypto/tls into every start of both commands (issue 18: start-up cost).
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	size  int64 // -1: unknown
	desc  string
	now   func() time.Time
	start time.Time
	n     int64     // bytes so far
	at    time.Time // last redraw
	atN   int64     // bytes at the last redraw
	rate  float64   // current rate, bytes/s (0: none yet)
	width int       // length of the line drawn last, to blank its rest
}

// progressEvery is the shortest time between two redraws.
const progressEvery = 200 * time.Millisecond

// progressBar is the width of the bar between its brackets.
const progressBar = 20

// newProgress returns a progress line on w for a stream of size bytes (-1
// if unknown: then it shows bytes and rates without a bar or time left).
func newProgress(w io.Writer, size int64, desc string) *progress {
	return newProgressClock(w, size, desc, time.Now)
}

// newProgressClock is newProgress on the clock now.
func newProgressClock(w io.Writer, size int64, desc string, now func() time.Time) *progress {
	t := now()
	return &progress{w: w, size: size, desc: desc, now: now, start: t, at: t}
}

// set records that n bytes moved (a pipe.SendConfig.Progress function) and
// draws the line the first time, then whenever progressEvery has passed
// since the last redraw.
func (p *progress) set(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n = n
	if now := p.now(); p.width == 0 || now.Sub(p.at) >= progressEvery {
		if now.Sub(p.at) >= progressEvery {
			p.sample(now)
		}
		p.draw(now)
	}
}

// end draws the final line, after sent bytes, and ends it with a newline:
// at 100% only when the whole size moved, else where the stream stopped,
// so that it never claims bytes that did not move.
func (p *progress) end(sent int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n = sent
	p.finish()
}

// stop is end where the last set left the stream.
func (p *progress) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finish()
}

// finish draws the final line and its newline; p.mu is held. Like set, it
// measures the current rate over no interval shorter than progressEvery.
func (p *progress) finish() {
	now := p.now()
	if now.Sub(p.at) >= progressEvery {
		p.sample(now)
	}
	p.draw(now)
	fmt.Fprintln(p.w)
}

// sample updates the current rate with the bytes since the last redraw:
// the mean of the last interval's rate and the one before. (set samples
// no interval shorter than progressEvery: the first line, drawn at once,
// has no rate yet rather than one measured over a moment.)
func (p *progress) sample(now time.Time) {
	if !now.After(p.at) {
		return
	}
	r := float64(p.n-p.atN) / now.Sub(p.at).Seconds()
	if p.rate > 0 {
		r = (r + p.rate) / 2
	}
	p.rate, p.at, p.atN = r, now, p.n
}

// draw writes the line over the previous one.
func (p *progress) draw(now time.Time) {
	var b strings.Builder
	if d := now.Sub(p.start); d >= progressEvery || p.width > 0 {
		fmt.Fprintf(&b, "%s (average %.1f MB/s)", p.desc, rate(p.n, d))
	} else {
		fmt.Fprintf(&b, "%s (average - MB/s)", p.desc)
	}
	if p.size > 0 {
		done := min(p.n, p.size)
		fill := int(done * progressBar / p.size)
		fmt.Fprintf(&b, " %3d%% [%s%s] %s / %s", done*100/p.size,
			strings.Repeat("#", fill), strings.Repeat(" ", progressBar-fill), formatBytes(p.n), formatBytes(p.size))
	} else {
		fmt.Fprintf(&b, " %s", formatBytes(p.n))
	}
	if p.rate > 0 {
		fmt.Fprintf(&b, ", %.1f MB/s", p.rate/1e6)
	} else {
		b.WriteString(", - MB/s")
	}
	if p.size > 0 && p.rate > 0 && p.n < p.size {
		left := time.Duration(float64(p.size-p.n) / p.rate * float64(time.Second))
		fmt.Fprintf(&b, ", %s left", left.Round(time.Second))
	}
	line := b.String()
	pad := max(p.width-len(line), 0)
	p.width = len(line)
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
}
