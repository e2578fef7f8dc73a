package quick

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
)

// node is a file ("name"), directory ("name/"), link ("name -> target")
// or named pipe ("name|") of a test tree, with its data and its modification time in seconds
// after t0.
type node struct {
	name, data string
	at         int
}

var t0 = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// makeTree makes the nodes under dir, then gives each its time (the
// directory t, the copy's top, t0), and returns dir/t.
func makeTree(t *testing.T, dir string, nodes []node) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "t"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		p := filepath.Join(dir, "t", n.name)
		var err error
		switch {
		case strings.HasSuffix(n.name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.Contains(n.name, " -> "):
			name, target, _ := strings.Cut(n.name, " -> ")
			err = os.Symlink(target, filepath.Join(dir, "t", name))
		case strings.HasSuffix(n.name, "|"):
			err = syscall.Mkfifo(strings.TrimSuffix(p, "|"), 0o640)
		default:
			err = os.WriteFile(p, []byte(n.data), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range slices.Backward(append([]node{{name: "/"}}, nodes...)) {
		if strings.Contains(n.name, " -> ") {
			continue
		}
		at := t0.Add(time.Duration(n.at) * time.Second)
		if err := os.Chtimes(filepath.Join(dir, "t", strings.TrimSuffix(n.name, "|")), at, at); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "t")
}

// listing lists the tree at top as the copy's entry t.
func listing(t *testing.T, top string, hash bool) *Listing {
	t.Helper()
	return listingLeaving(t, top, hash, nil)
}

// listingLeaving lists the tree at top as the copy's entry t, leaving out
// what leave says.
func listingLeaving(t *testing.T, top string, hash bool, leave func(string, bool) bool) *Listing {
	t.Helper()
	list, err := List(top, "t", How{Hash: hash, Leave: leave})
	if err != nil {
		t.Fatal(err)
	}
	l := NewListing([]string{"t"})
	for _, e := range list {
		if err := l.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// quickCases are trees and flags whose itemized changes rsync -ai
// --dry-run and Compare must agree on.
var quickCases = []struct {
	name     string
	flags    []string
	src, dst []node
	want     []string
}{
	{"new file", nil, []node{{"a", "x", 0}}, nil, []string{">f+++++++++ t/a"}},
	{"changed size", nil, []node{{"a", "xx", 0}}, []node{{"a", "x", 0}}, []string{">f.s....... t/a"}},
	{"changed mtime", nil, []node{{"a", "x", 0}}, []node{{"a", "x", -60}}, []string{">f..t...... t/a"}},
	{"size and mtime", nil, []node{{"a", "xx", 0}}, []node{{"a", "x", -60}}, []string{">f.st...... t/a"}},
	{"unchanged", nil, []node{{"a", "x", 0}, {"d/", "", 0}, {"d/b", "y", 0}}, []node{{"a", "x", 0}, {"d/", "", 0}, {"d/b", "y", 0}}, nil},
	{"dest newer, -u", []string{"-u"}, []node{{"a", "x", 0}}, []node{{"a", "yy", 60}}, nil},
	{"dest older, -u", []string{"-u"}, []node{{"a", "x", 0}}, []node{{"a", "yy", -60}}, []string{">f.st...... t/a"}},
	{"dest newer, no -u", nil, []node{{"a", "x", 0}}, []node{{"a", "x", 60}}, []string{">f..t...... t/a"}},
	{"existing, --ignore-existing", []string{"--ignore-existing"}, []node{{"a", "x", 0}, {"b", "new", 0}}, []node{{"a", "yy", -60}}, []string{">f+++++++++ t/b"}},
	{"extra file, --delete", []string{"--delete"}, []node{{"a", "x", 0}}, []node{{"a", "x", 0}, {"x", "old", 0}}, []string{"*deleting   t/x"}},
	{"extra file, no --delete", nil, []node{{"a", "x", 0}}, []node{{"a", "x", 0}, {"x", "old", 0}}, nil},
	{"extra tree, --delete", []string{"--delete"}, []node{{"a", "x", 0}}, []node{{"a", "x", 0}, {"d/", "", 0}, {"d/e/", "", 0}, {"d/e/f", "z", 0}}, []string{"*deleting   t/d/", "*deleting   t/d/e/", "*deleting   t/d/e/f"}},
	{"new directory", nil, []node{{"n/", "", 0}, {"n/f", "q", 0}}, nil, []string{">f+++++++++ t/n/f", "cd+++++++++ t/n/"}},
	{"directory time", nil, []node{{"n/", "", 0}}, []node{{"n/", "", -60}}, []string{".d..t...... t/n/"}},
	{"new link", nil, []node{{"l -> a", "", 0}}, nil, []string{"cL+++++++++ t/l -> a"}},
	{"same link", nil, []node{{"l -> a", "", 0}}, []node{{"l -> a", "", 0}}, nil},
	{"new named pipe", nil, []node{{"p|", "", 0}}, nil, []string{"cS+++++++++ t/p"}},
	{"same named pipe", nil, []node{{"p|", "", 0}}, []node{{"p|", "", 0}}, nil},
	{"same size and time, other data, -c", []string{"-c"}, []node{{"a", "xy", 0}}, []node{{"a", "yx", 0}}, []string{">fc........ t/a"}},
	{"same data, -c", []string{"-c"}, []node{{"a", "xy", 0}, {"b", "b", 0}}, []node{{"a", "xy", 0}, {"b", "b", 0}}, nil},
	{"same size, other data and time, --size-only", []string{"--size-only"}, []node{{"a", "xy", 0}, {"b", "bb", 0}}, []node{{"a", "yx", 0}, {"b", "b", 0}}, []string{">f.s....... t/b"}},
	{"excluded, --delete", []string{"--delete", "--exclude=*.o", "--exclude=d/"}, []node{{"a", "x", 0}, {"b.o", "o", 0}, {"d/", "", 0}, {"d/f", "f", 0}},
		[]node{{"a", "x", 0}, {"x.o", "o", 0}, {"y", "y", 0}, {"d/", "", 0}, {"d/g", "g", 0}}, []string{"*deleting   t/y"}},
	{"excluded, --delete-excluded", []string{"--delete-excluded", "--exclude=*.o", "--exclude=d/"}, []node{{"a", "x", 0}, {"b.o", "o", 0}, {"d/", "", 0}, {"d/f", "f", 0}},
		[]node{{"a", "x", 0}, {"x.o", "o", 0}, {"y", "y", 0}, {"d/", "", 0}, {"d/g", "g", 0}}, []string{"*deleting   t/d/", "*deleting   t/d/g", "*deleting   t/x.o", "*deleting   t/y"}},
	{"included, --delete-excluded", []string{"--delete-excluded", "--include=k.o", "--exclude=*.o"}, []node{{"a", "x", 0}, {"k.o", "k", 0}},
		[]node{{"a", "x", 0}, {"k.o", "k", 0}, {"x.o", "o", 0}}, []string{"*deleting   t/x.o"}},
}

// filterOf returns the filter rules of the --exclude and --include flags
// among flags, in their order.
func filterOf(t *testing.T, flags []string) *filter.Rules {
	rules := &filter.Rules{}
	for _, f := range flags {
		var err error
		if p, ok := strings.CutPrefix(f, "--exclude="); ok {
			err = rules.Exclude(p)
		} else if p, ok := strings.CutPrefix(f, "--include="); ok {
			err = rules.Include(p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return rules
}

// rulesOf returns the rules of rsync -a with flags, as rdmacp -a sets them
// on the receiving side.
func rulesOf(flags []string) Rules {
	return Rules{
		Perms: true, Times: true, Specials: true,
		Checksum:       slices.Contains(flags, "-c"),
		SizeOnly:       slices.Contains(flags, "--size-only"),
		Update:         slices.Contains(flags, "-u"),
		IgnoreExisting: slices.Contains(flags, "--ignore-existing"),
		Delete:         slices.Contains(flags, "--delete") || slices.Contains(flags, "--delete-excluded"),
	}
}

// TestCompare checks Compare's itemized changes for each case.
func TestCompare(t *testing.T) {
	t.Parallel()
	for _, c := range quickCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := rulesOf(c.flags)
			rules := filterOf(t, c.flags)
			if !slices.Contains(c.flags, "--delete-excluded") {
				r.Protect = rules.Match
			}
			src := listingLeaving(t, makeTree(t, t.TempDir(), c.src), r.Checksum, rules.Match)
			dst := listing(t, makeTree(t, t.TempDir(), c.dst), r.Checksum)
			got := Compare(src, dst, r).Items
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("items %q, want %q", got, c.want)
			}
		})
	}
}

// TestCompareAsRsync checks that rsync -ai --dry-run finds the changes
// each case expects, so that Compare agrees with rsync.
func TestCompareAsRsync(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("rsync"); err != nil {
		if os.Getenv("RDMAPIPE_STRICT") == "1" {
			t.Fatal("rsync is not installed (scripts/deps.sh installs it)")
		}
		t.Skip("rsync is not installed (scripts/deps.sh installs it)")
	}
	for _, c := range quickCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			src := makeTree(t, t.TempDir(), c.src)
			dst := filepath.Dir(makeTree(t, t.TempDir(), c.dst))
			args := append([]string{"-ai", "--dry-run"}, c.flags...)
			out, err := exec.Command("rsync", append(args, src, dst+"/")...).CombinedOutput()
			if err != nil {
				t.Fatalf("rsync: %v: %s", err, out)
			}
			got := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(out) == 0 {
				got = nil
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("rsync's items %q, want %q", got, c.want)
			}
		})
	}
}

// TestCompareSkips checks which of the source's files a comparison sends.
func TestCompareSkips(t *testing.T) {
	t.Parallel()
	src := listing(t, makeTree(t, t.TempDir(), []node{{"same", "x", 0}, {"changed", "yy", 0}, {"d/", "", 0}, {"l -> same", "", 0}}), false)
	dst := listing(t, makeTree(t, t.TempDir(), []node{{"same", "x", 0}, {"changed", "y", 0}, {"d/", "", 0}, {"l -> same", "", 0}}), false)
	p := Compare(src, dst, Rules{Perms: true, Times: true})
	want := map[string]bool{"t/same": true, "t/l": true}
	if len(p.Skip) != len(want) || !p.Skip["t/same"] || !p.Skip["t/l"] {
		t.Errorf("skips %v, want %v", p.Skip, want)
	}
}

// TestDeletionsProtect checks that a protected entry and the directories
// above it are kept, and only what the source's directories cover goes.
func TestDeletionsProtect(t *testing.T) {
	t.Parallel()
	src := listing(t, makeTree(t, t.TempDir(), []node{{"a", "x", 0}, {"f", "file here", 0}}), false)
	dst := listing(t, makeTree(t, t.TempDir(), []node{{"a", "x", 0}, {"d/", "", 0}, {"d/keep", "k", 0}, {"d/drop", "k", 0}, {"f/", "", 0}, {"f/g", "", 0}}), false)
	protect := func(p string, isDir bool) bool { return p == "t/d/keep" && !isDir }
	got := Compare(src, dst, Rules{Delete: true, Protect: protect}).Delete
	want := []string{"t/f/g", "t/f", "t/d/drop"}
	if !slices.Equal(got, want) {
		t.Errorf("deletions %q, want %q", got, want)
	}
}

// TestDeletionsProtectDir checks that what is under a protected directory
// is kept too, as rsync does not look into an excluded directory.
func TestDeletionsProtectDir(t *testing.T) {
	t.Parallel()
	src := listing(t, makeTree(t, t.TempDir(), []node{{"a", "x", 0}}), false)
	dst := listing(t, makeTree(t, t.TempDir(), []node{{"a", "x", 0}, {"d/", "", 0}, {"d/e/", "", 0}, {"d/e/z", "z", 0}, {"x", "x", 0}}), false)
	protect := func(p string, isDir bool) bool { return p == "t/d" && isDir }
	got := Compare(src, dst, Rules{Delete: true, Protect: protect}).Delete
	if want := []string{"t/x"}; !slices.Equal(got, want) {
		t.Errorf("deletions %q, want %q", got, want)
	}
}

// TestCompareMarks compares entries that differ only in their marks, or
// are special files: a mark that differs sends the entry, itemized with
// rsync's o, g, a and x; a mark one side did not list is not compared;
// special files go only where the copy carries them.
func TestCompareMarks(t *testing.T) {
	t.Parallel()
	m1, m2 := strings.Repeat("1", markLen), strings.Repeat("2", markLen)
	file := Entry{Name: "t/a", Type: File, Size: 1, MTime: 5, Mode: 0o644}
	with := func(e Entry, m Marks) Entry { e.Marks = m; return e }
	link := Entry{Name: "t/l", Type: Link, Link: "a", MTime: 5, Mode: 0o777}
	fifo := Entry{Name: "t/p", Type: Special, MTime: 5, Mode: 0o640}
	dev := Entry{Name: "t/n", Type: Device, MTime: 5, Mode: 0o666}
	for _, tc := range []struct {
		name     string
		src, dst Entry // dst.Name "": the destination has none
		specials bool
		want     string // "": not sent
	}{
		{"same marks", with(file, Marks{m1, m1, m1, m1}), with(file, Marks{m1, m1, m1, m1}), false, ""},
		{"owner", with(file, Marks{Owner: m1}), with(file, Marks{Owner: m2}), false, "<f....o.... t/a"},
		{"group and xattrs", with(file, Marks{Group: m1, Xattrs: m1}), with(file, Marks{Group: m2, Xattrs: m2}), false, "<f.....g..x t/a"},
		{"ACLs", with(file, Marks{ACLs: m1}), with(file, Marks{ACLs: m2}), false, "<f.......a. t/a"},
		{"owner not listed by the receiver", with(file, Marks{Owner: m1, Group: m1}), file, false, ""},
		{"link's group", with(link, Marks{Group: m1}), with(link, Marks{Group: m2}), false, "cL.....g... t/l -> a"},
		{"same link", with(link, Marks{Group: m1}), with(link, Marks{Group: m1}), false, ""},
		{"new fifo, not carried", fifo, Entry{}, false, ""},
		{"new fifo", fifo, Entry{}, true, "cS+++++++++ t/p"},
		{"same fifo", fifo, fifo, true, ""},
		{"fifo's mode", fifo, Entry{Name: "t/p", Type: Special, MTime: 5, Mode: 0o600}, true, "cS...p..... t/p"},
		{"new device", dev, Entry{}, true, "cD+++++++++ t/n"},
		{"fifo's owner", with(fifo, Marks{Owner: m1}), with(fifo, Marks{Owner: m2}), true, "cS....o.... t/p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := NewListing([]string{"t"}), NewListing([]string{"t"})
			top := Entry{Name: "t", Type: Dir, Mode: 0o755}
			for _, add := range []error{src.Add(top), dst.Add(top), src.Add(tc.src)} {
				if add != nil {
					t.Fatal(add)
				}
			}
			if tc.dst.Name != "" {
				if err := dst.Add(tc.dst); err != nil {
					t.Fatal(err)
				}
			}
			p := Compare(src, dst, Rules{Perms: true, Times: true, Specials: tc.specials, Sending: true})
			got := strings.Join(p.Items, "\n")
			if got != tc.want || p.Skip[tc.src.Name] != (tc.want == "") {
				t.Errorf("items %q, skipped %v; want %q", got, p.Skip[tc.src.Name], tc.want)
			}
		})
	}
}
