package tree

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"syscall"
)

// segment is a run of a file's data: len bytes at off.
type segment struct {
	off, len int64
}

// end is the offset just past the segment.
func (s segment) end() int64 { return s.off + s.len }

// Seek whences for lseek(2) that the os package has no names for.
const (
	seekData = 3 // SEEK_DATA: the next offset at or after the one given that holds data
	seekHole = 4 // SEEK_HOLE: the next hole (the end of the file counts as one)
)

// dataSegments returns the runs of data in the first size bytes of f, as
// SEEK_DATA and SEEK_HOLE find them; the rest is holes. Where they fail
// (a file system that cannot tell holes) or make no sense, it returns the
// whole file as data, which is always right. It leaves f's offset at 0.
func dataSegments(f *os.File, size int64) ([]segment, error) {
	segs := findData(f, size)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("rewind %s: %w", f.Name(), err)
	}
	return segs, nil
}

// findData is dataSegments without the rewind.
func findData(f *os.File, size int64) []segment {
	all := []segment{{0, size}}
	var segs []segment
	for off := int64(0); off < size; {
		data, err := f.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			break // only a hole after off
		}
		if err != nil || data < off {
			return all
		}
		if data >= size {
			break
		}
		hole, err := f.Seek(data, seekHole)
		if err != nil || hole <= data {
			return all
		}
		hole = min(hole, size)
		segs = append(segs, segment{data, hole - data})
		off = hole
	}
	return segs
}

// dataLen is the number of bytes in segs.
func dataLen(segs []segment) int64 {
	var n int64
	for _, s := range segs {
		n += s.len
	}
	return n
}

// coarsen returns segs with at most max segments: when there are more, the
// smallest holes between them are filled (sent as the zeros they read
// as), keeping the max-1 largest.
func coarsen(segs []segment, max int) []segment {
	if len(segs) <= max {
		return segs
	}
	gaps := make([]int64, len(segs)-1)
	for i := range gaps {
		gaps[i] = segs[i+1].off - segs[i].end()
	}
	largest := slices.Sorted(slices.Values(gaps))[len(gaps)-(max-1):]
	cut := int64(math.MaxInt64) // the smallest gap kept
	if len(largest) > 0 {
		cut = largest[0]
	}
	ties := 0 // how many gaps of size cut are kept
	for ties < len(largest) && largest[ties] == cut {
		ties++
	}
	out := []segment{segs[0]}
	for i, g := range gaps {
		keep := g > cut || g == cut && ties > 0
		if g == cut && keep {
			ties--
		}
		if keep {
			out = append(out, segs[i+1])
		} else {
			out[len(out)-1].len = segs[i+1].end() - out[len(out)-1].off
		}
	}
	return out
}
