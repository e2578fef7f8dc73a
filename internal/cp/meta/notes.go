package meta

import (
	"fmt"
	"io"
	"sync"
)

// notes writes each note once, so that what a copy cannot keep is named
// on stderr without a line for every file.
type notes struct {
	w    io.Writer
	mu   sync.Mutex
	done map[string]bool
}

// maxNotes bounds the distinct notes: after that many, one more says
// that the rest are not named.
const maxNotes = 64

// once writes the note formatted from format and args, under key, unless
// a note under key was written (or maxNotes were).
func (n *notes) once(key, format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.done[key] || len(n.done) > maxNotes:
		return
	case n.done == nil:
		n.done = map[string]bool{}
	}
	n.done[key] = true
	if len(n.done) > maxNotes {
		fmt.Fprintf(n.w, "rdmacp: more is not kept, not named here\n")
		return
	}
	fmt.Fprintf(n.w, "rdmacp: "+format+"\n", args...)
}
