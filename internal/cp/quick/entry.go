// Package quick is what makes a repeated rdmacp cheap, as rsync's quick
// check does: the listing of what a tree holds, the comparison of a
// source's listing with a destination's, and the removal, relative to a
// directory and never through a link, of what the source does not have.
package quick

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// Types of an entry.
const (
	File    = "f" // a regular file
	Dir     = "d" // a directory
	Link    = "L" // a symbolic link
	Device  = "D" // a character or block device
	Special = "S" // a named pipe or socket
)

// Bounds of a listing, which a peer may send.
const (
	MaxEntries = 1 << 20   // entries in a listing
	MaxPath    = 4096      // bytes of a name or a link's target
	MaxElem    = 255       // bytes of one element of a name
	MaxBytes   = 128 << 20 // bytes of names and targets in all
	MaxLine    = 12 << 10  // bytes of an entry's text (see Entry.AppendText)
	hashLen    = 16        // bytes of an XXH3-128 hash
)

// Entry is one file, directory, link or special file of a listing: its
// name (slash-separated, its first element one of the copy's top-level
// names), type, size, modification time (Unix nanoseconds), permission
// bits (07777), a link's target, and, when asked for, a regular file's
// XXH3-128 hash in hex and the marks of what else the copy keeps.
type Entry struct {
	Name  string
	Type  string
	Size  int64
	MTime int64
	Mode  uint32
	Link  string
	Hash  string
	Marks Marks
	// file is, for a regular file with several links that this side
	// listed, its device and inode (never on the wire).
	file fileID
}

// fileID is a file's device and inode.
type fileID struct{ dev, ino uint64 }

// Marks are digests of what a copy keeps of an entry besides its data,
// mode and times, each 16 hex digits (XXH3-64), "" where the side that
// listed it does not list it: its owner, group, ACLs and user.* xattrs.
type Marks struct{ Owner, Group, ACLs, Xattrs string }

// markLen is the length of a mark.
const markLen = 16

// parts returns pointers to m's fields, in their order in an entry's text.
func (m *Marks) parts() []*string { return []*string{&m.Owner, &m.Group, &m.ACLs, &m.Xattrs} }

// appendText appends m's text to b: its marks separated by commas, "-"
// for each not listed.
func (m Marks) appendText(b []byte) []byte {
	for i, p := range m.parts() {
		if i > 0 {
			b = append(b, ',')
		}
		if *p == "" {
			b = append(b, '-')
		}
		b = append(b, *p...)
	}
	return b
}

// parseMarks parses marks' text as appendText writes it.
func parseMarks(s string) (Marks, error) {
	var m Marks
	rest := s
	for i, p := range m.parts() {
		f, more, found := strings.Cut(rest, ",")
		if found != (i < len(m.parts())-1) {
			return Marks{}, fmt.Errorf("marks %.80q: not %d", s, len(m.parts()))
		}
		rest = more
		if f == "-" {
			continue
		}
		if !isMark(f) {
			return Marks{}, fmt.Errorf("marks %.80q: not 16 hex digits or -", s)
		}
		*p = f
	}
	return m, nil
}

// isMark says whether f is a mark: 16 lower-case hex digits.
func isMark(f string) bool {
	if len(f) != markLen {
		return false
	}
	for i := range len(f) {
		if c := f[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// List lists the tree at top as Walk does, into a slice.
func List(top, name string, how How) ([]Entry, error) {
	var list []Entry
	err := Walk(top, name, how, func(e Entry) error {
		list = append(list, e)
		return nil
	})
	return list, err
}

// AppendText appends e's text, as a listing's line has it, to b: its
// type, mode in octal, size, modification time and hash ("-" for none),
// then its marks (see Marks.appendText), its name and, for a link, its
// target, each quoted as a Go string; separated by spaces.
func (e Entry) AppendText(b []byte) []byte {
	b = append(b, e.Type...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(e.Mode), 8)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Size, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.MTime, 10)
	b = append(b, ' ')
	if e.Hash == "" {
		b = append(b, '-')
	}
	b = append(b, e.Hash...)
	b = append(b, ' ')
	b = e.Marks.appendText(b)
	b = append(b, ' ')
	b = strconv.AppendQuote(b, e.Name)
	if e.Link != "" {
		b = append(b, ' ')
		b = strconv.AppendQuote(b, e.Link)
	}
	return b
}

// ParseEntry parses s, an entry's text as AppendText writes it; what
// the entry says is checked as it is added to a listing (see Listing.Add).
func ParseEntry(s string) (Entry, error) {
	var f [6]string
	rest, ok := s, true
	for i := range f {
		if f[i], rest, ok = strings.Cut(rest, " "); !ok {
			return Entry{}, fmt.Errorf("entry %.64q: fewer than 7 fields", s)
		}
	}
	mode, err1 := strconv.ParseUint(f[1], 8, 32)
	size, err2 := strconv.ParseInt(f[2], 10, 64)
	mtime, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || f[4] == "" || !canon(f[1]) || !canon(f[2]) || !canon(f[3]) {
		return Entry{}, fmt.Errorf("entry %.64q: mode, size, time or hash", s)
	}
	e := Entry{Type: f[0], Mode: uint32(mode), Size: size, MTime: mtime}
	var err error
	if f[4] != "-" {
		e.Hash = f[4]
	}
	if e.Marks, err = parseMarks(f[5]); err != nil {
		return e, fmt.Errorf("entry %.64q: %v", s, err)
	}
	name, link, err := names(rest)
	if err != nil {
		return e, fmt.Errorf("entry %.64q: %v", s, err)
	}
	e.Name, e.Link = name, link
	return e, nil
}

// canon says whether the number n is written as AppendText writes it:
// no sign but a minus, no leading zero.
func canon(n string) bool {
	d := strings.TrimPrefix(n, "-")
	return d != "" && !(d[0] == '0' && (len(d) > 1 || n != d)) && d[0] != '+'
}

// names parses the quoted name and, if any, link target that end an
// entry's text.
func names(s string) (name, link string, err error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", errors.New("a name not quoted")
	}
	name, _ = strconv.Unquote(q)
	rest := s[len(q):]
	if rest == "" {
		return name, "", nil
	}
	if q, err = strconv.QuotedPrefix(strings.TrimPrefix(rest, " ")); err != nil || rest != " "+q {
		return "", "", errors.New("more than a quoted name and target")
	}
	link, _ = strconv.Unquote(q)
	if link == "" {
		return "", "", errors.New("an empty target")
	}
	return name, link, nil
}

// hashFile returns the XXH3-128 hash of the regular file base in dirfd,
// in hex, opened without following a link.
func hashFile(dirfd int, base string) (string, error) {
	fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	h := xxh3.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", base, err)
	}
	sum := h.Sum128().Bytes()
	return hex.EncodeToString(sum[:]), nil
}

// checkName checks that n is a relative, clean, slash-separated name of
// at most MaxPath bytes of valid UTF-8, each element a plain one of at
// most MaxElem bytes.
func checkName(n string) error {
	if n == "" || len(n) > MaxPath || !utf8.ValidString(n) || strings.ContainsRune(n, 0) {
		return fmt.Errorf("name %.64q: empty, too long, not UTF-8 or with a NUL byte", n)
	}
	for el := range strings.SplitSeq(n, "/") {
		if el == "" || el == "." || el == ".." || len(el) > MaxElem {
			return fmt.Errorf("name %.64q: absolute, not clean, or with '..' or a long element", n)
		}
	}
	return nil
}

// Listing is a checked listing, as a peer sent it: every name under one
// of the copy's top-level names, once, its parent listed before it as a
// directory, within the bounds.
type Listing struct {
	tops    []string
	entries [][]Entry      // in the order added, listChunk a slice
	index   map[string]int // each name's place in entries
	bytes   int
}

// NewListing returns an empty listing of entries under tops.
func NewListing(tops []string) *Listing {
	return &Listing{tops: tops, index: map[string]int{}}
}

// Add checks e and adds it to l.
func (l *Listing) Add(e Entry) error {
	if err := l.check(e); err != nil {
		return err
	}
	l.put(e)
	return nil
}

// listChunk is how many entries a listing holds in one slice: a slice
// that grew to hold them all would be copied again and again.
const listChunk = 1024

// put adds e to l.
func (l *Listing) put(e Entry) {
	l.bytes += len(e.Name) + len(e.Link)
	n := len(l.index)
	if n%listChunk == 0 {
		l.entries = append(l.entries, make([]Entry, 0, listChunk))
	}
	l.index[e.Name] = n
	l.entries[n/listChunk] = append(l.entries[n/listChunk], e)
}

// each hands each entry of l to do, in the order added.
func (l *Listing) each(do func(Entry)) {
	for _, c := range l.entries {
		for _, e := range c {
			do(e)
		}
	}
}

// Put adds e, an entry that this side's own walk (see Walk) listed under
// a top-level entry already added, to l, checking only the listing's
// bounds: the walk lists each name once, each directory before what it
// holds, and checks the rest.
func (l *Listing) Put(e Entry) error {
	if len(l.index) == MaxEntries || l.bytes+len(e.Name)+len(e.Link) > MaxBytes {
		return fmt.Errorf("entry %q: more than %d entries or %d bytes of names", e.Name, MaxEntries, MaxBytes)
	}
	l.put(e)
	return nil
}

// check checks e, an entry to add to l.
func (l *Listing) check(e Entry) error {
	if err := checkName(e.Name); err != nil {
		return err
	}
	top, _, _ := strings.Cut(e.Name, "/")
	if !slices.Contains(l.tops, top) {
		return fmt.Errorf("entry %q: not under the copy's names", e.Name)
	}
	if _, dup := l.index[e.Name]; dup {
		return fmt.Errorf("entry %q: listed twice", e.Name)
	}
	if len(l.index) == MaxEntries || l.bytes+len(e.Name)+len(e.Link) > MaxBytes {
		return fmt.Errorf("entry %q: more than %d entries or %d bytes of names", e.Name, MaxEntries, MaxBytes)
	}
	if parent, _ := l.Get(path.Dir(e.Name)); path.Dir(e.Name) != "." && parent.Type != Dir {
		return fmt.Errorf("entry %q: its directory is not listed before it", e.Name)
	}
	return e.checkFields()
}

// checkFields checks e's fields but its name.
func (e Entry) checkFields() error {
	switch {
	case !slices.Contains([]string{File, Dir, Link, Device, Special}, e.Type):
		return fmt.Errorf("entry %q: type %.8q", e.Name, e.Type)
	case e.Size < 0 || e.Size > 0 && e.Type != File:
		return fmt.Errorf("entry %q: size %d", e.Name, e.Size)
	case e.Mode > 0o7777:
		return fmt.Errorf("entry %q: mode %o", e.Name, e.Mode)
	case len(e.Link) > MaxPath || strings.ContainsRune(e.Link, 0) || e.Link != "" && e.Type != Link:
		return fmt.Errorf("entry %q: link target %.64q", e.Name, e.Link)
	}
	if b, err := hex.DecodeString(e.Hash); e.Hash != "" && (err != nil || len(b) != hashLen || e.Type != File) {
		return fmt.Errorf("entry %q: hash %.40q", e.Name, e.Hash)
	}
	return nil
}

// Len is how many entries l holds.
func (l *Listing) Len() int { return len(l.index) }

// Get returns the entry named name, if l has it.
func (l *Listing) Get(name string) (Entry, bool) {
	i, ok := l.index[name]
	if !ok {
		return Entry{}, false
	}
	return l.entries[i/listChunk][i%listChunk], true
}

// Names returns l's names, sorted.
func (l *Listing) Names() []string {
	names := make([]string, 0, len(l.index))
	for n := range l.index {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
