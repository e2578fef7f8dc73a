package sendrecv

import (
	"fmt"

	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/internal/window"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// describe is the -v line that says which window this side asks for and
// how much memory that locks here at most (the peer's answer may be
// smaller, and the RDMA write data path needs less on the receiver).
func describe(w window.Window, name string, receiver bool) string {
	return fmt.Sprintf("%s: chunk %s x depth %d (%s): buffers of up to %s on this side", name, units.Size(int64(w.Chunk)), w.Depth, w.Why, formatMiB(locks(w, receiver)))
}

// locks is how much buffer memory the window registers at most on the
// sender's or the receiver's side.
func locks(w window.Window, receiver bool) int64 {
	p := w.Params()
	if receiver {
		l := conn.ReceiverLayout(p)
		return int64(l.RecvBufs * l.RecvSize)
	}
	l := conn.SenderLayout(p)
	return int64(l.SendBufs * l.SendSize)
}

// formatMiB prints a byte count in MiB with one decimal.
func formatMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
