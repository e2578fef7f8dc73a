// Package progress draws a progress line on stderr: on a terminal redrawn
// in place (carriage return), elsewhere one line each time, at most every
// so often, with the current rate measured over the last redraws.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Sample is what one drawing of the line shows.
type Sample struct {
	N       int64         // bytes so far
	Elapsed time.Duration // since the start
	Rate    float64       // the current rate, bytes/s; 0: none measured yet
	First   bool          // the first line drawn
	Final   bool          // the last line, drawn by End or Stop
}

// Config says where and how a Meter draws.
type Config struct {
	W      io.Writer
	Every  time.Duration       // the shortest time between two drawings
	Lines  bool                // one line each drawing (not a terminal), not redrawn in place
	Now    func() time.Time    // the clock; nil: time.Now
	Format func(Sample) string // the line, without carriage return or newline
}

// Meter is a progress line. Its methods may be called from several
// goroutines.
type Meter struct {
	mu    sync.Mutex
	c     Config
	start time.Time
	n     int64     // bytes so far
	at    time.Time // last drawing
	atN   int64     // bytes at the last drawing
	rate  float64   // current rate, bytes/s (0: none yet)
	drawn bool
	width int // length of the line drawn last, to blank its rest
}

// New returns a Meter that starts now and has drawn nothing.
func New(c Config) *Meter {
	if c.Now == nil {
		c.Now = time.Now
	}
	t := c.Now()
	return &Meter{c: c, start: t, at: t}
}

// Set records that n bytes moved and draws the line the first time, then
// whenever Every has passed since the last drawing.
func (m *Meter) Set(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n = n
	if now := m.c.Now(); !m.drawn || now.Sub(m.at) >= m.c.Every {
		if now.Sub(m.at) >= m.c.Every {
			m.sample(now)
		}
		m.draw(now, false)
	}
}

// End draws the final line, after n bytes, and ends it: it shows where
// the stream stopped, so that it never claims bytes that did not move.
func (m *Meter) End(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n = n
	m.finish()
}

// Stop is End where the last Set left the stream, if a line was drawn.
func (m *Meter) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.drawn {
		m.finish()
	}
}

// finish draws the final line and ends it; m.mu is held. Like Set, it
// measures the current rate over no interval shorter than Every.
func (m *Meter) finish() {
	now := m.c.Now()
	if now.Sub(m.at) >= m.c.Every {
		m.sample(now)
	}
	m.draw(now, true)
	if !m.c.Lines {
		fmt.Fprintln(m.c.W)
	}
}

// sample updates the current rate with the bytes since the last drawing:
// the mean of the last interval's rate and the one before. (Set samples
// no interval shorter than Every: the first line, drawn at once, has no
// rate yet rather than one measured over a moment.)
func (m *Meter) sample(now time.Time) {
	if !now.After(m.at) {
		return
	}
	r := float64(m.n-m.atN) / now.Sub(m.at).Seconds()
	if m.rate > 0 {
		r = (r + m.rate) / 2
	}
	m.rate, m.at, m.atN = r, now, m.n
}

// draw writes the line: over the previous one, or after it with Lines.
func (m *Meter) draw(now time.Time, final bool) {
	line := m.c.Format(Sample{N: m.n, Elapsed: now.Sub(m.start), Rate: m.rate, First: !m.drawn, Final: final})
	m.drawn = true
	if m.c.Lines {
		fmt.Fprintln(m.c.W, line)
		return
	}
	pad := max(m.width-len(line), 0)
	m.width = len(line)
	fmt.Fprintf(m.c.W, "\r%s%s", line, strings.Repeat(" ", pad))
}

// Bytes prints a byte count with a binary unit and one decimal.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Terminal says whether f is a terminal.
func Terminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
