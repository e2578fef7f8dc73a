package sink

import (
	"fmt"
	"io"

	"github.com/zeebo/xxh3"
)

// spillFile is where a backlog spills: a file used as a ring.
type spillFile interface {
	io.ReaderAt
	io.WriterAt
}

// piece is a run of the stream a backlog holds, at most one block long: in
// memory, or in the spill ring from position at on.
type piece struct {
	buf  []byte // in memory: the bytes; nil when spilled
	at   int64  // spilled: the ring position of its first byte
	n    int
	hash *xxh3.Hasher // spilled, while it takes more bytes: their hash so far
	sum  uint64       // spilled and sealed: the XXH3 of its bytes
}

// backlog is what a Lag holds, in stream order: pieces in memory blocks,
// at most maxBlocks of them, then pieces in a spill ring of spillSize
// bytes. Its methods are called with the Lag's lock held, but for read.
type backlog struct {
	block     int // bytes per memory block, and per piece at most
	maxBlocks int
	spillSize int64
	open      func() (spillFile, error) // makes the spill file, once
	spill     spillFile
	free      [][]byte // memory blocks free
	blocks    int      // memory blocks allocated
	queue     []*piece // oldest first; the last takes more bytes while sealed is false
	sealed    bool
	start     int64 // the spill ring's first position held
	end       int64 // the position after its last
	held      int64 // bytes held, in memory and spilled
	spilled   int64 // bytes that went to the spill, in all
}

// add copies as much of p as there is room for and returns how much.
func (b *backlog) add(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := b.addPiece(p[n:])
		n += m
		if err != nil || m == 0 {
			return n, err
		}
	}
	return n, nil
}

// addPiece copies the start of p to the last piece, or to a new one: in
// memory while a block is free, else in the spill, and returns how much
// it copied (0: there is no room).
func (b *backlog) addPiece(p []byte) (int, error) {
	if t := b.last(); t != nil && t.buf != nil && len(t.buf) < cap(t.buf) {
		m := min(len(p), cap(t.buf)-len(t.buf))
		t.buf = append(t.buf, p[:m]...)
		t.n += m
		b.held += int64(m)
		return m, nil
	}
	if buf := b.freeBlock(); buf != nil {
		b.push(&piece{buf: buf[:0]})
		return b.addPiece(p)
	}
	room := b.spillSize - (b.end - b.start)
	if room <= 0 {
		return 0, nil
	}
	t := b.last()
	if t == nil || t.buf != nil || t.n == b.block {
		t = &piece{at: b.end, hash: xxh3.New()}
		b.push(t)
	}
	if b.spill == nil {
		f, err := b.open()
		if err != nil {
			return 0, fmt.Errorf("make the spill file: %w", err)
		}
		b.spill = f
	}
	m := int(min(int64(len(p)), int64(b.block-t.n), room))
	if err := b.ring(p[:m], b.end, b.spill.WriteAt); err != nil {
		return 0, fmt.Errorf("write the spill file: %w", err)
	}
	t.hash.Write(p[:m])
	t.n += m
	b.end += int64(m)
	b.held += int64(m)
	b.spilled += int64(m)
	return m, nil
}

// last returns the piece that takes more bytes, or nil.
func (b *backlog) last() *piece {
	if b.sealed || len(b.queue) == 0 {
		return nil
	}
	return b.queue[len(b.queue)-1]
}

// push seals the last piece and adds t after it.
func (b *backlog) push(t *piece) {
	b.seal()
	b.queue = append(b.queue, t)
	b.sealed = false
}

// seal ends the last piece: it takes no more bytes.
func (b *backlog) seal() {
	if t := b.last(); t != nil && t.hash != nil {
		t.sum, t.hash = t.hash.Sum64(), nil
	}
	b.sealed = true
}

// freeBlock returns a free memory block, allocating one while fewer than
// maxBlocks are, or nil.
func (b *backlog) freeBlock() []byte {
	if n := len(b.free); n > 0 {
		buf := b.free[n-1]
		b.free = b.free[:n-1]
		return buf
	}
	if b.blocks < b.maxBlocks {
		b.blocks++
		return make([]byte, 0, b.block)
	}
	return nil
}

// take removes the oldest piece (sealing it) and returns it, or nil if
// none is held. Its bytes stay held until release.
func (b *backlog) take() *piece {
	if len(b.queue) == 0 {
		return nil
	}
	if len(b.queue) == 1 {
		b.seal()
	}
	t := b.queue[0]
	b.queue[0] = nil
	b.queue = b.queue[1:]
	return t
}

// release gives back what piece t, taken and written, held.
func (b *backlog) release(t *piece) {
	b.held -= int64(t.n)
	if t.buf != nil {
		b.free = append(b.free, t.buf[:0])
		return
	}
	b.start = t.at + int64(t.n)
}

// read returns the bytes of taken piece t: its memory, or its bytes read
// back from the spill into scratch (a block) and checked against their
// hash. It may run without the lock: nothing writes where t is.
func (b *backlog) read(t *piece, scratch []byte) ([]byte, error) {
	if t.buf != nil {
		return t.buf, nil
	}
	p := scratch[:t.n]
	if err := b.ring(p, t.at, b.spill.ReadAt); err != nil {
		return nil, fmt.Errorf("read the spill file: %w", err)
	}
	if xxh3.Hash(p) != t.sum {
		return nil, fmt.Errorf("the spill file's %d bytes at stream position %d differ from those written to it: the disk damaged them", t.n, t.at)
	}
	return p, nil
}

// ring does do at ring position pos for p, in two parts where p wraps
// round the spill ring's end.
func (b *backlog) ring(p []byte, pos int64, do func([]byte, int64) (int, error)) error {
	for len(p) > 0 {
		off := pos % b.spillSize
		m := int(min(int64(len(p)), b.spillSize-off))
		if n, err := do(p[:m], off); n < m {
			if err == nil {
				err = fmt.Errorf("%d of %d bytes at offset %d", n, m, off)
			}
			return err
		}
		p, pos = p[m:], pos+int64(m)
	}
	return nil
}
