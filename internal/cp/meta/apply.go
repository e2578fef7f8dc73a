package meta

import (
	"archive/tar"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
)

// Bounds of what one archive entry may carry for -X and -A: the
// receiving side refuses an entry with more. (archive/tar's Reader bounds
// an entry's PAX records to 1 MiB in all.)
const (
	MaxXattrs     = 128      // xattrs, ACLs included
	MaxXattrName  = 255      // bytes of a name, as the kernel's XATTR_NAME_MAX
	MaxXattrValue = 64 << 10 // bytes of a value, as the kernel's XATTR_SIZE_MAX
)

// Applier applies what Flags keep to the entries of an extraction, on
// the receiving side, treating the archive as hostile: it takes only the
// xattr namespaces this process may set, within bounds, and hard links
// only to files that this extraction wrote. A nil Applier keeps nothing.
type Applier struct {
	f     Flags
	root  bool
	notes notes
	wrote map[string]bool // the regular files this extraction wrote, by name
	mu    sync.Mutex      // guards uids and gids, for ApplyFD
	uids  map[string]int  // user names looked up, -1 for unknown
	gids  map[string]int
}

// NewApplier returns an Applier of what f keeps, for a process that is
// root if root, with notes on warn.
func NewApplier(f Flags, root bool, warn io.Writer) *Applier {
	return &Applier{f: f, root: root, notes: notes{w: warn}, wrote: map[string]bool{}, uids: map[string]int{}, gids: map[string]int{}}
}

// Applies says whether a has something to apply to entries in place
// (see Apply); false for nil.
func (a *Applier) Applies() bool { return a != nil && a.f.applies() }

// Check checks the archive entry h, called name, before anything of it
// is written: a hard link, device or named pipe only as asked for (-H,
// -D), xattrs within bounds, ids and device numbers in range.
func (a *Applier) Check(h *tar.Header, name string) error {
	if a == nil {
		return nil
	}
	switch h.Typeflag {
	case tar.TypeLink:
		if !a.f.Links {
			return fmt.Errorf("archive entry %q: a hard link, without -H", name)
		}
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if !a.f.Devices {
			return fmt.Errorf("archive entry %q: a device or named pipe, without -D", name)
		}
	}
	if !inRange(int64(h.Uid), int64(h.Gid), h.Devmajor, h.Devminor) {
		return fmt.Errorf("archive entry %q: user, group or device number out of range", name)
	}
	if !a.f.Xattrs && !a.f.ACLs {
		return nil
	}
	n := 0
	for k, v := range h.PAXRecords {
		x, ok := strings.CutPrefix(k, XattrPrefix)
		if !ok {
			continue
		}
		if n++; n > MaxXattrs || x == "" || len(x) > MaxXattrName || len(v) > MaxXattrValue {
			return fmt.Errorf("archive entry %q: more than %d xattrs, or one with a name of 0 or more than %d bytes or a value of more than %d", name, MaxXattrs, MaxXattrName, MaxXattrValue)
		}
	}
	return nil
}

// inRange says whether each of ns fits an id or device number: 0 to
// 2^32-2 (-1, all ones, means no change to chown).
func inRange(ns ...int64) bool {
	for _, n := range ns {
		if n < 0 || n >= math.MaxUint32 {
			return false
		}
	}
	return true
}

// Wrote records what the extraction just put at name: a regular file it
// wrote (or a hard link to one) if file, else something a hard link may
// not point to.
func (a *Applier) Wrote(name string, file bool) {
	if a == nil || !a.f.Links {
		return
	}
	if file {
		a.wrote[name] = true
	} else {
		delete(a.wrote, name)
	}
}

// LinkTarget checks that target, the name under the extraction's root a
// hard link entry called name points to, is a regular file that this
// extraction wrote: nothing outside it, nothing that was there before.
func (a *Applier) LinkTarget(name, target string) error {
	if a == nil || !a.wrote[target] || name == target {
		return fmt.Errorf("archive entry %q: a hard link to %q, which is not a file this copy wrote before it", name, target)
	}
	return nil
}
