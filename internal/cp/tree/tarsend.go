package tree

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
)

// Source is one source of an archive.
type Source struct {
	Path string          // as given
	Name string          // its name at the destination (base name): a top-level name of the archive
	Skip map[string]bool // names in the archive of its files and links not to send (see internal/cp/incr.go)
	// Rules say what of the tree under it the walk leaves out; nil: nothing.
	Rules *filter.Rules
}

// WriteTar writes the sources to w as a tar archive (PAX, with
// nanosecond times): each under its destination name, directories with
// everything in them. Files with holes are stored as sparse entries,
// without their holes (see writeSparseEntry). Symbolic links inside
// directories are stored as links; sockets, pipes and devices are skipped
// with a warning on warn, but with keep what it keeps of them (see
// meta.Reader): hard links, xattrs, ACLs, owners' names, devices.
//
// With rs, a file that the receiving side offered (see resume.go) is sent
// from where its offer stops matching: the entry carries where its data
// starts (resumeRecord), and rs counts the bytes not sent again. t, if
// not nil, counts the entries and their data as they pass.
func WriteTar(w io.Writer, srcs []Source, warn io.Writer, rs *Resumption, keep meta.Flags, t *Tally) error {
	bw := bufio.NewWriterSize(w, tarBuf)
	a := archiver{w: bw, tw: tar.NewWriter(bw), warn: warn, buf: make([]byte, copyBuf), rs: rs, flags: keep, t: t}
	if keep.Any() {
		a.keep = meta.NewReader(keep, os.Geteuid() == 0, warn)
	}
	if rs != nil {
		rs.kept = 0
	}
	r := newReadAhead(srcs, rs)
	defer r.close()
	for e, ok := r.next(); ok; e, ok = r.next() {
		err := a.add(e)
		r.release(e)
		if err != nil {
			return err
		}
	}
	if err := a.tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// tarBuf is how much of the archive WriteTar gathers before it writes:
// small files and headers go out in full messages, not one each.
const tarBuf = 1 << 20

// archiver writes an archive to w: through tw, but sparse entries, which
// tw cannot write, straight to w.
type archiver struct {
	w     io.Writer
	tw    *tar.Writer
	warn  io.Writer
	buf   []byte       // for copying files' data
	rs    *Resumption  // what the receiving side has, when resuming
	keep  *meta.Reader // what the archive keeps besides data, modes and times; nil: nothing
	flags meta.Flags   // what keep keeps
	t     *Tally       // counts what passes, for the progress line; nil: nothing
}

// resumeRecord is the PAX record of a resumed entry: where its data
// starts in the file (the entry's size is what follows).
const resumeRecord = "RDMACP.resume"

// Resumption is what the receiving side of a tree's resume offered: its
// files, by name in the archive, and the key their hashes are under.
type Resumption struct {
	have  map[string]proto.Offer
	names []string // the archive's top-level names
	key   []byte
	kept  int64 // bytes of offered files not sent again
}

// NewResumption returns the Resumption of the archive of srcs under key,
// with nothing offered yet.
func NewResumption(srcs []Source, key []byte) *Resumption {
	rs := &Resumption{have: map[string]proto.Offer{}, key: key}
	for _, s := range srcs {
		rs.names = append(rs.names, s.Name)
	}
	return rs
}

// Kept is how many bytes of the files the receiving side offered were
// not sent again.
func (rs *Resumption) Kept() int64 { return rs.kept }

// offered says whether the receiving side offered the file name; rs may
// be nil, when not resuming.
func (rs *Resumption) offered(name string) bool {
	if rs == nil {
		return false
	}
	_, ok := rs.have[name]
	return ok
}

// Add takes in an offer from the receiving side, which must name a file
// under the archive's top-level names not offered before, and be valid;
// at most proto.MaxOffers.
func (rs *Resumption) Add(o proto.Offer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Name == "" || o.End || len(o.Hashes) > proto.TreeHashes {
		return fmt.Errorf("offer for %.64q: names no file, or more than %d block hashes", o.Name, proto.TreeHashes)
	}
	if err := underNames(o.Name, rs.names); err != nil {
		return fmt.Errorf("offer for %.64q: not under the archive's names", o.Name)
	}
	if _, dup := rs.have[o.Name]; dup || len(rs.have) == proto.MaxOffers {
		return fmt.Errorf("offer for %.64q: offered before, or more than %d offers", o.Name, proto.MaxOffers)
	}
	rs.have[o.Name] = o
	return nil
}

// resume moves f, the file that goes into the archive as h, to where its
// data starts for the receiving side and marks h so (see resumeRecord).
func (rs *Resumption) resume(f *os.File, h *tar.Header) error {
	o, ok := rs.have[strings.TrimSuffix(h.Name, "/")]
	if !ok {
		return nil
	}
	at, err := proto.ResumeAt(f, o, rs.key)
	if err != nil || at == 0 {
		return err
	}
	if _, err := f.Seek(at, io.SeekStart); err != nil {
		return err
	}
	if h.PAXRecords == nil {
		h.PAXRecords = map[string]string{}
	}
	h.PAXRecords[resumeRecord] = strconv.FormatInt(at, 10)
	h.Size -= at
	rs.kept += at
	return nil
}

// add adds e, an entry of the walk, to the archive, and counts it in
// a.t.
func (a archiver) add(e walked) error {
	if e.err != nil {
		return e.err
	}
	h, err := a.header(e)
	if err != nil || h == nil {
		return err
	}
	if err := a.write(h, e); err != nil {
		return err
	}
	a.t.entry(h.Typeflag)
	return nil
}

// header returns the header of e in the archive, or nil if the archive
// skips it (with a warning).
func (a archiver) header(e walked) (*tar.Header, error) {
	p, fi := e.path, e.fi
	var link string
	if fi.Mode()&fs.ModeSymlink != 0 {
		var err error
		if link, err = os.Readlink(p); err != nil {
			return nil, err
		}
	}
	if !archived(fi, a.flags) {
		fmt.Fprintf(a.warn, "rdmacp: %s: skipped (%v, not a file, directory or link)\n", p, fi.Mode().Type())
		return nil, nil
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	h.Name, h.Format = e.name, tar.FormatPAX
	h.Uname, h.Gname, h.ChangeTime = "", "", time.Time{}
	if fi.IsDir() {
		h.Name += "/"
	}
	if a.keep != nil {
		if err := a.keep.Header(p, fi, h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// archived says whether an archive that keeps what keep says holds an
// entry that fi describes: a directory, regular file or symbolic link,
// or a special file that keep keeps.
func archived(fi fs.FileInfo, keep meta.Flags) bool {
	m := fi.Mode()
	return m.IsDir() || m.IsRegular() || m&fs.ModeSymlink != 0 || keep.Special(fi)
}

// write writes e with its header h to the archive, its data too if it
// is a regular file, counting the data in a.t.
func (a archiver) write(h *tar.Header, e walked) error {
	p, fi := e.path, e.fi
	if h.Typeflag != tar.TypeReg {
		if err := a.tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	}
	if e.data != nil {
		return a.addData(h, e.data, p)
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	segs := []segment{{0, h.Size}}
	if mayHaveHoles(fi) {
		if segs, err = dataSegments(f, h.Size); err != nil {
			return err
		}
	}
	if dataLen(segs) < h.Size {
		// The previous entry's padding first: w must be at a block boundary.
		if err := a.tw.Flush(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := writeSparseEntry(a.w, h, f, segs, a.buf); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		a.t.add(h.Size)
		return nil
	}
	if a.rs != nil {
		if err := a.rs.resume(f, h); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if err := a.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	// Through a.buf: io.Copy would take a new buffer for each file.
	if _, err := io.CopyBuffer(struct{ io.Writer }{a.tw}, a.t.reader(f), a.buf); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// addData adds the file at p, read ahead into data, to the archive with
// header h: as add would have copied it, in case it changed since its stat.
// Its header is written by fileHead, a fraction of tw's cost, unless the
// file changed size, which tw reports.
func (a archiver) addData(h *tar.Header, data []byte, p string) error {
	if int64(len(data)) == h.Size {
		// The previous entry's padding first: w must be at a block boundary.
		if err := a.tw.Flush(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, b := range [][]byte{fileHead(a.buf[:0], h), data, padding(h.Size)} {
			if _, err := a.w.Write(b); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		a.t.add(h.Size)
		return nil
	}
	if err := a.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if _, err := a.tw.Write(data); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	a.t.add(h.Size)
	return nil
}

// fileHead appends to dst the PAX header of h, a regular file's
// FileInfoHeader with add's changes (no change time; user and group names
// and PAX records only as keep adds them):
// what tw writes for it, as archive/tar's Reader reads it. An extended
// header carries the times to the nanosecond and whatever does not fit
// the ustar block.
func fileHead(dst []byte, h *tar.Header) []byte {
	hdr := block{name: h.Name, typ: tar.TypeReg, mode: h.Mode, mtime: h.ModTime.Unix(), size: h.Size}
	var recs string
	if len(h.Name) > 100 || !isASCII(h.Name) {
		recs += paxRecord("path", h.Name)
	}
	if h.ModTime.Nanosecond() != 0 {
		recs += paxRecord("mtime", paxTime(h.ModTime))
	}
	return appendHead(dst, h.Name, recs+ownerRecords(&hdr, h), hdr)
}

// isASCII says whether s is all ASCII, as a ustar name field must be.
func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// mayHaveHoles says whether the file fi describes may have holes: not if
// its blocks hold all its bytes, the usual case, which needs no search.
func mayHaveHoles(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Blocks*512 < fi.Size()
}
