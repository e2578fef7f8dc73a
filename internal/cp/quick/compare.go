package quick

import (
	"path"
	"slices"
	"strings"
)

// Rules are how a source's listing is compared with a destination's: as
// rsync's quick check (same size and modification time: not sent) unless
// Checksum (same size and hash) or SizeOnly (same size); with Update a
// file newer at the destination is not sent, with IgnoreExisting no file
// that exists there. Perms says that the copy sets permission bits (a
// file whose bits differ is sent), Times that it sets directories' times
// (a tree's files always get theirs), Specials that it carries devices
// and named pipes. A file not sent keeps its times.
type Rules struct {
	Checksum, SizeOnly, Update, IgnoreExisting bool
	Perms, Times, Specials                     bool
	// Delete plans the removal of what the destination has and the
	// source not, in the directories the copy covers, but what Protect
	// says it protects (nil: nothing).
	Delete  bool
	Protect func(path string, isDir bool) bool
	// Sending says that this side sends (rsync's '<'), else it receives
	// ('>').
	Sending bool
}

// Plan is what a comparison found: the source's files and links not to
// send, the destination's entries to remove (children before their
// directory), and rsync's itemized changes, removals first.
type Plan struct {
	Skip   map[string]bool
	Delete []string
	Items  []string
}

// Compare compares src with dst under r.
func Compare(src, dst *Listing, r Rules) Plan {
	p := Plan{Skip: make(map[string]bool, src.Len())}
	if r.Delete {
		p.Delete = deletions(src, dst, r.Protect)
		for _, n := range p.Delete {
			e, _ := dst.Get(n)
			p.Items = append(p.Items, "*deleting   "+itemName(e))
		}
	}
	var items [][2]string // each changed entry's name and item
	src.each(func(s Entry) {
		d, ok := dst.Get(s.Name)
		send, item := r.decide(s, d, ok)
		if !send && s.Type != Dir {
			p.Skip[s.Name] = true
		}
		if item != "" {
			items = append(items, [2]string{s.Name, item + " " + itemName(s)})
		}
	})
	slices.SortFunc(items, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	for _, it := range items {
		p.Items = append(p.Items, it[1])
	}
	return p
}

// decide says whether s, a source entry, is sent, d being what the
// destination has of it (if has), and its itemized change ("" if none).
// Directories always go (their modes and times are set at the end), and
// special files only where the copy carries them (an archive without -D
// does not), as new ones or where their mode or marks differ.
func (r Rules) decide(s, d Entry, has bool) (bool, string) {
	switch {
	case (s.Type == Device || s.Type == Special) && !r.Specials:
		return false, ""
	case !has || d.Type != s.Type:
		return true, r.verb(s) + s.Type + "+++++++++"
	case s.Type == Dir:
		return true, r.changes(".", s, d, "")
	case r.IgnoreExisting:
		return false, ""
	case s.Type == Device || s.Type == Special:
		if (!r.Perms || s.Mode == d.Mode) && marksDiffer(s.Marks, d.Marks) == "" {
			return false, ""
		}
		return true, r.changes("c", s, d, "")
	case s.Type == Link:
		switch {
		case s.Link != d.Link || s.Link == "":
			return true, "cLc........"
		case marksDiffer(s.Marks, d.Marks) != "":
			return true, r.changes("c", s, d, "")
		}
		return false, ""
	case r.Update && d.MTime > s.MTime:
		return false, ""
	}
	c := ""
	same := s.Size == d.Size
	switch {
	case r.Checksum:
		same = same && s.Hash == d.Hash && s.Hash != ""
		if s.Size == d.Size && !same {
			c = "c"
		}
	case !r.SizeOnly:
		same = same && s.MTime == d.MTime
	}
	if same && (!r.Perms || s.Mode == d.Mode) && marksDiffer(s.Marks, d.Marks) == "" {
		return false, ""
	}
	// Other data, permissions, owner, ACLs or xattrs, which only sending
	// it sets here.
	return true, r.changes(r.verb(s), s, d, c)
}

// verb is the first letter of an itemized change that creates or sends s.
func (r Rules) verb(s Entry) string {
	switch {
	case s.Type != File:
		return "c"
	case r.Sending:
		return "<"
	}
	return ">"
}

// changes is the itemized change of s over d, an entry of its type, that
// starts with verb and has c in the checksum column: "" if a directory
// has nothing to change.
func (r Rules) changes(verb string, s, d Entry, c string) string {
	b := []byte(verb + s.Type + ".........")
	if c != "" {
		b[2] = 'c'
	}
	if s.Type == File && s.Size != d.Size {
		b[3] = 's'
	}
	if s.MTime != d.MTime && (s.Type == File || r.Times && s.Type == Dir) { // a link's time is not set
		b[4] = 't'
	}
	if r.Perms && s.Mode != d.Mode && s.Type != Link {
		b[5] = 'p'
	}
	m := marksDiffer(s.Marks, d.Marks)
	for i, letter := range "ogax" {
		if strings.ContainsRune(m, letter) {
			b[6+i+i/2] = byte(letter) // rsync's columns: o g u a x
		}
	}
	if s.Type == Dir && string(b[2:]) == "........." {
		return ""
	}
	return string(b)
}

// marksDiffer returns the letters of rsync's itemized changes (o, g, a,
// x) for the marks of s and d that differ, each compared only where both
// sides listed it.
func marksDiffer(s, d Marks) string {
	var letters []byte
	dp := d.parts()
	for i, p := range s.parts() {
		if *p != "" && *dp[i] != "" && *p != *dp[i] {
			letters = append(letters, "ogax"[i])
		}
	}
	return string(letters)
}

// SendLinked takes out of skip, the names of the files of l, a listing
// this side made, not to send, those that share their file with one that
// is sent: a copy that keeps hard links (-H) sends all the names of a
// file again, so that they are links of one file there too.
func SendLinked(l *Listing, skip map[string]bool) {
	sent := map[fileID]bool{}
	l.each(func(e Entry) {
		if e.file != (fileID{}) && !skip[e.Name] {
			sent[e.file] = true
		}
	})
	l.each(func(e Entry) {
		if sent[e.file] {
			delete(skip, e.Name)
		}
	})
}

// itemName is how an itemized change names e: a directory with a slash,
// a link with its target.
func itemName(e Entry) string {
	switch e.Type {
	case Dir:
		return e.Name + "/"
	case Link:
		return e.Name + " -> " + e.Link
	}
	return e.Name
}

// deletions returns what dst has that src has not (or has as another
// type where dst has a directory), within the directories of src, and
// everything under those; not what protect protects, nor what is under a
// protected directory, nor the directories above either. Children come
// before their directory.
func deletions(src, dst *Listing, protect func(string, bool) bool) []string {
	gone, kept := map[string]bool{}, map[string]bool{}
	for _, n := range dst.Names() { // parents first
		d, _ := dst.Get(n)
		s, has := src.Get(n)
		parent := path.Dir(n)
		p, _ := src.Get(parent)
		covered := parent != "." && (p.Type == Dir || gone[parent])
		if covered && (!has || d.Type == Dir && s.Type != Dir || gone[parent]) {
			gone[n] = true
		}
		kept[n] = kept[parent] || protect != nil && protect(n, d.Type == Dir)
	}
	for n := range gone {
		if !kept[n] {
			continue
		}
		for a := n; a != "."; a = path.Dir(a) {
			delete(gone, a)
		}
	}
	var list []string
	for n := range gone {
		list = append(list, n)
	}
	slices.SortFunc(list, func(a, b string) int { return strings.Compare(b, a) })
	return list
}
