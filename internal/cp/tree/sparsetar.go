package tree

import (
	"archive/tar"
	"errors"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// archive/tar's Writer cannot write sparse entries (Go issue 22735), so
// writeSparseEntry writes them itself in the PAX 1.0 format GNU tar
// writes and archive/tar's Reader reads: an extended header with
// GNU.sparse.major=1, GNU.sparse.minor=0, GNU.sparse.name (the real name)
// and GNU.sparse.realsize (the real size); then the entry's ustar header,
// whose size is what is stored; then the data block, which starts with
// the map (the number of data segments, then each one's offset and
// length, all in decimal, one a line, padded to a 512-byte block) and
// goes on with the segments' data, one after another.

// blockSize is the size of a tar block.
const blockSize = 512

// maxSegments bounds a sparse entry's map, so that it stays well under the
// 1 MiB archive/tar's Reader accepts (each segment takes at most 40 bytes).
const maxSegments = 16384

// errChanged is the failure of a file that changed size while it was
// read: what was stored of it would be wrong.
var errChanged = errors.New("changed size while being read")

// writeSparseEntry writes f, described by h (a FileInfoHeader of a regular
// file), to w as a sparse entry holding only segs, its data. w must be at
// a block boundary. It fails with errChanged if f's size differs from
// h.Size when it is done, or a segment turns out shorter.
func writeSparseEntry(w io.Writer, h *tar.Header, f *os.File, segs []segment, buf []byte) error {
	segs = coarsen(segs, maxSegments-1)
	if len(segs) == 0 || segs[len(segs)-1].end() < h.Size {
		// As GNU tar marks a hole at the end, which it otherwise leaves
		// out when it extracts.
		segs = append(slices.Clip(segs), segment{h.Size, 0})
	}
	m := sparseMap(segs)
	stored := int64(len(m)) + dataLen(segs)
	dir, file := path.Split(strings.TrimSuffix(h.Name, "/"))
	hdr := block{name: path.Join(dir, "GNUSparseFile.0", file), typ: tar.TypeReg, mode: h.Mode, mtime: h.ModTime.Unix()}
	recs := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
		paxRecord("GNU.sparse.name", h.Name) + paxRecord("GNU.sparse.realsize", strconv.FormatInt(h.Size, 10)) +
		paxRecord("mtime", paxTime(h.ModTime))
	if fits(stored, 12) {
		hdr.size = stored
	} else {
		recs += paxRecord("size", strconv.FormatInt(stored, 10))
	}
	recs += ownerRecords(&hdr, h)
	head := append(appendHead(nil, path.Join(dir, file), recs, hdr), m...)
	if _, err := w.Write(head); err != nil {
		return err
	}
	for _, s := range segs {
		n, err := io.CopyBuffer(w, io.NewSectionReader(f, s.off, s.len), buf)
		if err != nil {
			return err
		}
		if n < s.len {
			return errChanged
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != h.Size {
		return errChanged
	}
	_, err = w.Write(padding(stored))
	return err
}

// sparseMap is the map at the head of a PAX 1.0 sparse entry's data:
// the number of segments, then each one's offset and length, one number a
// line, padded to a whole block.
func sparseMap(segs []segment) []byte {
	b := strconv.AppendInt(nil, int64(len(segs)), 10)
	b = append(b, '\n')
	for _, s := range segs {
		b = strconv.AppendInt(b, s.off, 10)
		b = append(b, '\n')
		b = strconv.AppendInt(b, s.len, 10)
		b = append(b, '\n')
	}
	return append(b, padding(int64(len(b)))...)
}

// padding is the zeros that fill n bytes up to a whole block, to be
// written or copied, never changed.
func padding(n int64) []byte {
	return zeros[:(blockSize-n%blockSize)%blockSize]
}

// ownerRecords puts h's user and group ids in hdr where they fit its
// fields and returns the PAX records of h's access time, if it has one,
// of its user and group names, if it has them, of its own PAX records
// (xattrs, see meta.Reader), and of the ids that do not fit.
func ownerRecords(hdr *block, h *tar.Header) string {
	var recs string
	if !h.AccessTime.IsZero() {
		recs += paxRecord("atime", paxTime(h.AccessTime))
	}
	for _, n := range []struct{ key, v string }{{"uname", h.Uname}, {"gname", h.Gname}} {
		if n.v != "" {
			recs += paxRecord(n.key, n.v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(h.PAXRecords)) {
		recs += paxRecord(k, h.PAXRecords[k])
	}
	for _, n := range []struct {
		key   string
		v     int64
		field *int64
	}{{"uid", int64(h.Uid), &hdr.uid}, {"gid", int64(h.Gid), &hdr.gid}} {
		if fits(n.v, 8) {
			*n.field = n.v
		} else {
			recs += paxRecord(n.key, strconv.FormatInt(n.v, 10))
		}
	}
	return recs
}

// appendHead appends to dst the header of the entry called name: an
// extended header of recs, if there are any, named as archive/tar names
// it, then the ustar block hdr.
func appendHead(dst []byte, name, recs string, hdr block) []byte {
	if recs != "" {
		dir, file := path.Split(name)
		ext := block{name: path.Join(dir, "PaxHeaders.0", file), typ: tar.TypeXHeader, mode: 0o644, size: int64(len(recs))}
		dst = append(ext.appendTo(dst), recs...)
		dst = append(dst, padding(int64(len(recs)))...)
	}
	return hdr.appendTo(dst)
}

// paxRecord is one record of a PAX extended header: "LEN KEY=VALUE\n",
// where LEN counts the whole record, its own digits included.
func paxRecord(key, value string) string {
	rec := " " + key + "=" + value + "\n"
	n := len(rec) + 1
	for len(strconv.Itoa(n))+len(rec) != n {
		n++
	}
	return strconv.Itoa(n) + rec
}

// paxTime formats t as a PAX time: seconds since the epoch, with the
// nanoseconds as a decimal fraction (as archive/tar writes them).
func paxTime(t time.Time) string {
	secs, nsecs := t.Unix(), int64(t.Nanosecond())
	if nsecs == 0 {
		return strconv.FormatInt(secs, 10)
	}
	sign := ""
	if secs < 0 {
		sign, secs, nsecs = "-", -(secs + 1), 1e9-nsecs
	}
	frac := strconv.FormatInt(1e9+nsecs, 10)[1:] // nine digits
	return sign + strconv.FormatInt(secs, 10) + "." + strings.TrimRight(frac, "0")
}

// block is what writeSparseEntry puts in a ustar header. A number that
// does not fit its field is written as 0 (the extended header has it).
type block struct {
	name        string
	typ         byte
	mode        int64
	uid, gid    int64
	size, mtime int64
}

// encode returns b as a ustar header block (see appendTo).
func (b block) encode() []byte {
	return b.appendTo(make([]byte, 0, blockSize))
}

// appendTo appends b to dst as a ustar header block. A name longer than
// the field is cut: readers take the real name from the extended header.
// The block carries GNU tar's magic, not POSIX's: archive/tar's Reader
// then skips its check of a ustar block for non-ASCII bytes, a rune at a
// time, which was 7% of the receiving side's CPU for 20,000 small files
// (two blocks each); the block has no field where the two differ (prefix,
// GNU's times), and GNU tar and archive/tar read it, extended headers and
// all, as before.
func (b block) appendTo(dst []byte) []byte {
	dst = append(dst, make([]byte, blockSize)...)
	h := dst[len(dst)-blockSize:]
	copy(h[0:100], b.name)
	octal(h[100:108], b.mode)
	octal(h[108:116], b.uid)
	octal(h[116:124], b.gid)
	octal(h[124:136], b.size)
	octal(h[136:148], b.mtime)
	h[156] = b.typ
	copy(h[257:265], "ustar  \x00")
	copy(h[148:156], "        ")
	sum := int64(0)
	for _, c := range h {
		sum += int64(c)
	}
	octal(h[148:155], sum) // six digits and a NUL, then a space
	return dst
}

// octal writes v in field as zero-padded octal digits and a NUL, or 0
// if v does not fit.
func octal(field []byte, v int64) {
	if !fits(v, len(field)) {
		v = 0
	}
	for i := len(field) - 2; i >= 0; i-- {
		field[i] = '0' + byte(v&7)
		v >>= 3
	}
	field[len(field)-1] = 0
}

// fits says whether v fits a ustar number field of width bytes: octal
// digits and a NUL.
func fits(v int64, width int) bool {
	return v >= 0 && v < 1<<(3*(width-1))
}
