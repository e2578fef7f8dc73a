package server

import (
	"fmt"
	"io"
	"time"
)

// RefusalBurst is how many refused connections a Server logs a second; it
// counts the rest, so that a flood cannot fill the log.
const RefusalBurst = 10

// Refusals logs the connections a Server refused, at most RefusalBurst a
// second, as "PROG: refused a connection: ...". Its zero value, but for W
// and Prog, is ready to use.
type Refusals struct {
	W    io.Writer
	Prog string
	Now  func() time.Time // the clock; time.Now if nil

	window time.Time // when the current second began
	shown  int       // lines logged in it
	hidden int       // refusals not logged in it
}

// Log logs a refused connection, or counts it if RefusalBurst were logged
// in the last second; the count is logged when the next second's first
// refusal is.
func (r *Refusals) Log(err error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	if t := now(); t.Sub(r.window) >= time.Second {
		if r.hidden > 0 {
			fmt.Fprintf(r.W, "%s: %d more connections refused\n", r.Prog, r.hidden)
		}
		r.window, r.shown, r.hidden = t, 0, 0
	}
	if r.shown == RefusalBurst {
		r.hidden++
		return
	}
	r.shown++
	fmt.Fprintf(r.W, "%s: refused a connection: %v\n", r.Prog, err)
}
