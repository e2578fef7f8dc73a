// Package meta reads and applies what a copy keeps of a file besides its
// data, mode and times: hard links, extended attributes, POSIX ACLs,
// owners and devices, as the PAX records and entry types of a tar archive.
package meta

import (
	"fmt"
	"io/fs"
	"strings"
)

// Flags say what a copy keeps besides data, modes and times, each on its
// own (rsync's -a sets several).
type Flags struct {
	Links      bool // -H: hard links within the copy stay links
	Xattrs     bool // -X: extended attributes (user.*; as root trusted.* and security.* too)
	ACLs       bool // -A: POSIX ACLs, access and default
	Owner      bool // --owner: the user, as root
	Group      bool // -g: the group, as root
	Devices    bool // -D: devices and named pipes
	NumericIDs bool // --numeric-ids: owners by number, not mapped by name
}

// Special says whether the non-regular file fi describes goes into the
// archive: a device or named pipe, with -D (a socket, which tar cannot
// hold, never does).
func (f Flags) Special(fi fs.FileInfo) bool {
	return f.Devices && fi.Mode()&(fs.ModeDevice|fs.ModeNamedPipe) != 0
}

// letters are the Flags' letters in a request, in order.
const letters = "HXAogDn"

// fields returns pointers to f's fields, in the order of letters.
func (f *Flags) fields() []*bool {
	return []*bool{&f.Links, &f.Xattrs, &f.ACLs, &f.Owner, &f.Group, &f.Devices, &f.NumericIDs}
}

// String returns f as the letters of the flags set, "" for none.
func (f Flags) String() string {
	var b strings.Builder
	for i, set := range f.fields() {
		if *set {
			b.WriteByte(letters[i])
		}
	}
	return b.String()
}

// Parse returns the Flags that s, as String writes them, says.
func Parse(s string) (Flags, error) {
	var f Flags
	fields := f.fields()
	last := -1
	for i := range len(s) {
		k := strings.IndexByte(letters, s[i])
		if k <= last {
			return Flags{}, fmt.Errorf("kept metadata %.16q: not letters of %q, in order, once each", s, letters)
		}
		*fields[k], last = true, k
	}
	return f, nil
}

// Any says whether f keeps anything.
func (f Flags) Any() bool { return f != Flags{} }

// applies says whether f has something to apply to entries in place:
// xattrs, ACLs or owners.
func (f Flags) applies() bool { return f.Xattrs || f.ACLs || f.Owner || f.Group }
