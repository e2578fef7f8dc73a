// Package quick is what makes a repeated rdmacp cheap, as rsync's quick
// check does: the listing of what a tree holds, the comparison of a
// source's listing with a destination's, and the removal, relative to a
// directory and never through a link, of what the source does not have.
package quick

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/zeebo/xxh3"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
)

// Types of an entry.
const (
	File  = "f" // a regular file
	Dir   = "d" // a directory
	Link  = "L" // a symbolic link
	Other = "D" // a device, socket or pipe
)

// Bounds of a listing, which a peer may send.
const (
	MaxEntries = 1 << 20   // entries in a listing
	MaxPath    = 4096      // bytes of a name or a link's target
	MaxElem    = 255       // bytes of one element of a name
	MaxBytes   = 128 << 20 // bytes of names and targets in all
	MaxLine    = 12 << 10  // bytes of an entry in JSON
	hashLen    = 16        // bytes of an XXH3-128 hash
)

// Entry is one file, directory, link or special file of a listing: its
// name (slash-separated, its first element one of the copy's top-level
// names), type, size, modification time (Unix nanoseconds), permission
// bits (07777), a link's target, and, when asked for, a regular file's
// XXH3-128 hash in hex.
type Entry struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Size  int64  `json:"size,omitempty"`
	MTime int64  `json:"mtime,omitempty"`
	Mode  uint32 `json:"mode,omitempty"`
	Link  string `json:"link,omitempty"`
	Hash  string `json:"hash,omitempty"`
}

// List lists the tree at top, whose entries are named under name: top
// itself (not followed if it is a link) and, if it is a directory,
// everything under it, never through a link, parents before children.
// With hash it hashes each regular file. What leave (if not nil) says to
// leave out is, as what is under it (the copy's filter rules). Names that are not valid UTF-8,
// longer than MaxPath, or whose entry is longer than MaxLine in JSON are
// left out (and what is under them): a peer cannot name them, so they are
// never skipped nor removed. A missing top lists nothing.
func List(top, name string, hash bool, leave func(name string, isDir bool) bool) ([]Entry, error) {
	var list []Entry
	total := 0
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && p == top && errors.Is(err, fs.ErrNotExist):
			return fs.SkipAll
		case err != nil:
			return err
		}
		rel, err := filepath.Rel(top, p)
		if err != nil {
			return err
		}
		n := path.Join(name, filepath.ToSlash(rel))
		if checkName(n) != nil || leave != nil && leave(n, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		e, err := entryOf(p, n, d, hash)
		if err != nil {
			return err
		}
		if b, _ := json.Marshal(e); len(b) > MaxLine {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		total += len(e.Name) + len(e.Link)
		if len(list) == MaxEntries || total > MaxBytes {
			return fmt.Errorf("list %s: more than %d entries or %d bytes of names", top, MaxEntries, MaxBytes)
		}
		list = append(list, e)
		return nil
	})
	return list, err
}

// entryOf describes the entry d at p, named n.
func entryOf(p, n string, d fs.DirEntry, hash bool) (Entry, error) {
	fi, err := d.Info()
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Name: n, Type: typeOf(fi.Mode()), MTime: fi.ModTime().UnixNano(), Mode: meta.UnixMode(fi.Mode())}
	switch e.Type {
	case File:
		e.Size = fi.Size()
		if hash {
			e.Hash, err = hashFile(p)
		}
	case Link:
		e.Link, err = os.Readlink(p)
		if len(e.Link) > MaxPath || !utf8.ValidString(e.Link) {
			e.Link = "" // a target a peer cannot name: compared as changed
		}
	}
	return e, err
}

// typeOf is the type of an entry of mode m.
func typeOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return File
	case m.IsDir():
		return Dir
	case m&fs.ModeSymlink != 0:
		return Link
	}
	return Other
}

// hashFile returns the XXH3-128 hash of the regular file at p, in hex,
// opened without following a link.
func hashFile(p string) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := xxh3.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
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
	for _, el := range strings.Split(n, "/") {
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
	entries map[string]Entry
	bytes   int
}

// NewListing returns an empty listing of entries under tops.
func NewListing(tops []string) *Listing {
	return &Listing{tops: tops, entries: map[string]Entry{}}
}

// Add checks e and adds it to l.
func (l *Listing) Add(e Entry) error {
	if err := l.check(e); err != nil {
		return err
	}
	l.bytes += len(e.Name) + len(e.Link)
	l.entries[e.Name] = e
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
	if _, dup := l.entries[e.Name]; dup {
		return fmt.Errorf("entry %q: listed twice", e.Name)
	}
	if len(l.entries) == MaxEntries || l.bytes+len(e.Name)+len(e.Link) > MaxBytes {
		return fmt.Errorf("entry %q: more than %d entries or %d bytes of names", e.Name, MaxEntries, MaxBytes)
	}
	if parent := path.Dir(e.Name); parent != "." && l.entries[parent].Type != Dir {
		return fmt.Errorf("entry %q: its directory is not listed before it", e.Name)
	}
	return e.checkFields()
}

// checkFields checks e's fields but its name.
func (e Entry) checkFields() error {
	switch {
	case !slices.Contains([]string{File, Dir, Link, Other}, e.Type):
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
func (l *Listing) Len() int { return len(l.entries) }

// Get returns the entry named name, if l has it.
func (l *Listing) Get(name string) (Entry, bool) {
	e, ok := l.entries[name]
	return e, ok
}

// Names returns l's names, sorted.
func (l *Listing) Names() []string {
	names := make([]string, 0, len(l.entries))
	for n := range l.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
