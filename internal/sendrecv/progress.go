package sendrecv

import (
	"io"
	"os"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/progress"
)

// Progress lines: on a terminal, redrawn in place every progressEvery;
// elsewhere (a log) a line every progressLinesEvery.
const (
	progressEvery      = 200 * time.Millisecond
	progressLinesEvery = time.Second
)

// newProgress returns the -p progress line on w for a stream of size
// bytes (-1 if unknown: then it shows bytes, rate and elapsed time
// without a bar or time left), labelled desc: redrawn in place where w is
// a terminal, else a line at a time.
func newProgress(w io.Writer, size int64, desc string) *progress.Meter {
	c := progress.Config{W: w, Size: size, Label: desc, Every: progressEvery}
	if f, ok := w.(*os.File); !ok || !progress.Terminal(f) {
		c.Lines, c.Every = true, progressLinesEvery
	}
	return progress.New(c)
}
