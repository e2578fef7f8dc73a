// Package progress draws the progress line of rdmasend -p, rdmarecv -p
// and rdmacp --progress with github.com/schollz/progressbar/v3 (its bar,
// rate, elapsed time and time left, binary byte units and redrawing in
// place on a terminal); elsewhere each drawing is a line of its own. The
// commands import progressbar only through this package.
package progress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"
)

// Config says where and how a Meter draws.
type Config struct {
	W     io.Writer
	Size  int64         // the total bytes; 0 or less: unknown (no percentage or time left)
	Label string        // what the line starts with ("sending")
	Tail  func() string // if set, what the line ends with, asked at each drawing (rdmacp's counts)
	Every time.Duration // the shortest time between two drawings
	Lines bool          // not a terminal: a line each drawing, none redrawn in place
}

// Meter is a progress line. Its methods may be called from several
// goroutines.
type Meter struct {
	mu    sync.Mutex
	c     Config
	bar   *progressbar.ProgressBar
	out   *lineWriter // with Lines: what the bar draws, a line a drawing
	n     int64       // bytes so far
	at    time.Time   // the last drawing
	drawn bool
	ended bool
}

// New returns a Meter that has drawn nothing; its clock starts at the
// first drawing.
func New(c Config) *Meter {
	m := &Meter{c: c}
	w := c.W
	if c.Lines {
		m.out = &lineWriter{w: c.W}
		w = m.out
	}
	size := c.Size
	if size <= 0 {
		size = -1 // progressbar's unknown length: bytes and rate, a spinner
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(c.Label),
		progressbar.OptionShowBytes(true),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionShowCount(),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(size > 0),
		progressbar.OptionSetWidth(20),
		progressbar.OptionThrottle(0), // Set throttles, so that End always draws
		progressbar.OptionSpinnerType(14),
	}
	if c.Tail != nil {
		opts = append(opts, progressbar.OptionShowDescriptionAtLineEnd(), progressbar.OptionSetDescription(c.Tail()))
	}
	m.bar = progressbar.NewOptions64(size, opts...)
	return m
}

// Set records that n bytes moved and draws the line the first time, then
// whenever Every has passed since the last drawing.
func (m *Meter) Set(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n = n
	if now := time.Now(); !m.ended && (!m.drawn || now.Sub(m.at) >= m.c.Every) {
		m.at = now
		m.draw(n, false)
	}
}

// End draws the final line, after n bytes, and ends it: it shows where
// the stream stopped, so that it never claims bytes that did not move;
// at the total it shows the whole time taken and the average rate.
func (m *Meter) End(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finish(n)
}

// Stop is End where the last Set left the stream, if a line was drawn.
func (m *Meter) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.drawn {
		m.finish(m.n)
	}
}

// finish draws the final line at n and ends it; m.mu is held.
func (m *Meter) finish(n int64) {
	if m.ended {
		return
	}
	m.draw(n, true)
	if m.c.Size > 0 && n >= m.c.Size || m.c.Size <= 0 && n > 0 {
		m.bar.Finish() // the time taken, the average rate
	}
	m.flush()
	m.ended = true
	if !m.c.Lines {
		io.WriteString(m.c.W, "\n")
	}
}

// draw draws the line at n bytes, the final one if final; m.mu is held.
// The first drawing is the line at the start, at 0 bytes: it starts the
// bar's clock, so that no rate is ever measured over a moment.
func (m *Meter) draw(n int64, final bool) {
	if m.c.Tail != nil {
		m.bar.Describe(m.c.Tail())
	}
	if !m.drawn {
		m.drawn = true
		m.bar.RenderBlank()
		m.flush()
		if !final {
			return
		}
	}
	if m.c.Size > 0 {
		n = min(n, m.c.Size) // a stream longer than its --size stays at 100%
	}
	m.bar.Set64(n)
	if !final {
		m.flush()
	}
}

// flush writes the drawing that the bar made, as a line, with Lines.
func (m *Meter) flush() {
	if m.out != nil {
		m.out.flush()
	}
}

// lineWriter takes what the bar writes to redraw its line in place
// (carriage returns, blanks to wipe a longer line) and keeps the last
// line drawn, which flush writes out as a line of its own unless it is
// the line written before. The bar writes from its own goroutine too
// (its spinner's redraws), so mu guards last and prev.
type lineWriter struct {
	w          io.Writer
	mu         sync.Mutex
	last, prev []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, part := range bytes.Split(p, []byte("\r")) {
		if line := bytes.TrimRight(part, " "); len(line) > 0 {
			l.last = append(l.last[:0], line...)
		}
	}
	return len(p), nil
}

// flush writes the last line drawn since the last flush, if any and new.
func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) > 0 && !bytes.Equal(l.last, l.prev) {
		l.w.Write(append(l.last, '\n'))
		l.prev = append(l.prev[:0], l.last...)
	}
	l.last = l.last[:0]
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
