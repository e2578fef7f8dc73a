package sendrecv

import (
	"fmt"

	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/internal/window"
)

// describe is the -v line that says which window o asks for and how much
// memory the transport locks for it at most on this side, a receiver's if
// receiver (the peer's answer may make it smaller).
func describe(o options, name string, receiver bool) string {
	w, pins := o.window, window.Pins(o.transportOf(nil, "").Pins(receiver))
	locked := "locks no memory"
	if pins != nil {
		locked = "locks up to " + formatMiB(locks(w, pins))
	}
	return fmt.Sprintf("%s: chunk %s x depth %d (%s): this side %s", name, units.Size(int64(w.Chunk)), w.Depth, w.Why, locked)
}

// locks is how much memory the window w locks with pins (nil: none).
func locks(w window.Window, pins window.Pins) int64 {
	if pins == nil {
		return 0
	}
	return int64(pins(w.Chunk, w.Depth))
}

// formatMiB prints a byte count in MiB with one decimal.
func formatMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
