package pipe

import (
	"context"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/source"
)

// historyWindows is how many windows (chunk x depth) of the first
// connection a repairing sender or relay keeps of what it sent (see
// SendConfig.Repair) for each fallback, up to maxHistoryWindows: a fallback
// stands behind what was read by the windows of the hosts before it (the
// bytes read ahead, those in flight and waiting in the next receiver's
// window, and its relay's), about two each, and by its own window, what
// it received and has not written yet: one more.
const (
	historyWindows    = 2
	maxHistoryWindows = 8
)

// historySize is the history of a repairing stream with fallbacks
// fallbacks over a first connection described by info: none without
// one, for no one could be resent it.
func historySize(info conn.Info, fallbacks int) int {
	if fallbacks == 0 {
		return 0
	}
	return min(historyWindows*(1+fallbacks)+1, maxHistoryWindows) * info.Chunk * info.Depth
}

// history is the end of what a repairing sender read: a ring of the last
// len(ring) bytes of the stream, for a resend. The reader of the link's
// current sender records into it and reads from it (replaySource); the
// link reads start between streams.
type history struct {
	ring []byte
	end  int64 // the stream's bytes recorded
}

// start is the offset of the oldest byte the history holds.
func (h *history) start() int64 { return max(0, h.end-int64(len(h.ring))) }

// record appends p to the history.
func (h *history) record(p []byte) {
	if len(h.ring) == 0 {
		h.end += int64(len(p))
		return
	}
	for len(p) > 0 {
		at := int(h.end % int64(len(h.ring)))
		n := copy(h.ring[at:], p)
		p, h.end = p[n:], h.end+int64(n)
	}
}

// read copies into p what the history holds from offset off on (at least
// start), up to its end, and returns how much it copied.
func (h *history) read(p []byte, off int64) int {
	n := 0
	for n < len(p) && off < h.end {
		at := int(off % int64(len(h.ring)))
		m := copy(p[n:min(len(p), n+int(h.end-off))], h.ring[at:])
		n, off = n+m, off+int64(m)
	}
	return n
}

// replaySource is the input of one stream to a next receiver of a
// repairing sender or relay: what the history holds from where the
// receiver stands, then the input itself, recorded as it is handed out.
// Its sender's reader uses it; the link reads inputFailed after the
// stream.
type replaySource struct {
	h           *history
	b           source.Buffers
	pos         int64 // the stream offset of the next byte handed out
	inner       source.Source
	handed      int64 // bytes the inner source handed out
	inputFailed bool  // the inner source failed: nothing to repair
}

func (rs *replaySource) Next(ctx context.Context) (int, int, bool, error) {
	if rs.pos < rs.h.end {
		i, err := rs.b.Take(ctx)
		if err != nil {
			return 0, 0, false, err
		}
		n := rs.h.read(rs.b.Bufs[i][:rs.b.Chunk], rs.pos)
		rs.pos += int64(n)
		return i, n, false, nil
	}
	i, n, eof, err := rs.inner.Next(ctx)
	if n > 0 {
		rs.h.record(rs.b.Bufs[i][:n])
		rs.pos += int64(n)
		rs.handed += int64(n)
	}
	if err != nil && ctx.Err() == nil {
		rs.inputFailed = true
	}
	return i, n, eof, err
}

// Close closes the inner source after the bytes it handed out: a file
// read ahead is left at the next byte to record.
func (rs *replaySource) Close(int64) { rs.inner.Close(rs.handed) }

func (rs *replaySource) Describe() string { return rs.inner.Describe() + ", resendable" }

func (rs *replaySource) Serial() bool { return rs.inner.Serial() }
