package plan

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
)

func TestAskedName(t *testing.T) {
	for src, want := range map[string]string{
		"report.txt": "report.txt", "/data/w.bin": "w.bin", "dir/": "dir", "dir/.": "dir", "~/x": "x",
		"a/../b": "b", ".bashrc": ".bashrc", ".": "", "..": "", "~": "", "~/": "", "/": "", "a/..": "", "": "", "x/../..": "",
	} {
		if got := AskedName(src); got != want {
			t.Errorf("askedName(%q) = %q, want %q", src, got, want)
		}
	}
}

// TestAskedCheck: a plan is taken only for what was asked for; anything
// else is refused with the remote side's claim.
func TestAskedCheck(t *testing.T) {
	file := func(name string) proto.Contents { return proto.Contents{Mode: proto.ModeFile, Name: name} }
	tarOf := func(single bool, names ...string) proto.Contents {
		return proto.Contents{Mode: proto.ModeTar, Single: single, Names: names}
	}
	cases := []struct {
		name    string
		a       Asked
		c       proto.Contents
		newName bool
		claim   string // "": taken
	}{
		{"file", Asked{Srcs: []string{"d/report.txt"}}, file("report.txt"), false, ""},
		{"file, -r", Asked{Srcs: []string{"report.txt"}, Recursive: true}, file("report.txt"), false, ""},
		{"sparse file", Asked{Srcs: []string{"disk.img"}}, proto.Contents{Mode: proto.ModeSparse, Name: "disk.img"}, false, ""},
		{"file under another name", Asked{Srcs: []string{"report.txt"}}, file(".bashrc"), false, ".bashrc"},
		{"file for a directory", Asked{Srcs: []string{"."}, Recursive: true}, file(".bashrc"), true, ".bashrc"},
		{"file for several sources", Asked{Srcs: []string{"a", "b"}}, file("a"), false, "a"},
		{"archive without -r", Asked{Srcs: []string{"report.txt"}}, tarOf(true, "report.txt"), false, "an archive of report.txt"},
		{"archive, -r", Asked{Srcs: []string{"dir/"}, Recursive: true}, tarOf(true, "dir"), false, ""},
		{"archive of several files", Asked{Srcs: []string{"a", "x/b"}}, tarOf(false, "a", "b"), false, ""},
		{"archive of another name", Asked{Srcs: []string{"dir"}, Recursive: true}, tarOf(true, ".ssh"), false, ".ssh"},
		{"archive with one more", Asked{Srcs: []string{"a", "b"}}, tarOf(false, "a", "b", ".ssh"), false, "an archive of a, b, .ssh"},
		{"archive with names swapped", Asked{Srcs: []string{"a", "b"}}, tarOf(false, "b", "a"), false, "b"},
		{"archive said single", Asked{Srcs: []string{"a", "b"}}, tarOf(true, "a", "b"), false, "an archive of a, b"},
		{"dot to a new name", Asked{Srcs: []string{"."}, Recursive: true}, tarOf(true, "alice"), true, ""},
		{"dot into a directory", Asked{Srcs: []string{"."}, Recursive: true}, tarOf(true, ".ssh"), false, ".ssh"},
		{"home into a directory", Asked{Srcs: []string{"~"}, Recursive: true}, tarOf(true, "alice"), false, "alice"},
		{"dot among several", Asked{Srcs: []string{".", "b"}, Recursive: true}, tarOf(false, ".ssh", "b"), true, ".ssh"},
		// a source left out, and patterns (see glob.go)
		{"one of two left out", Asked{Srcs: []string{"a", "b"}}, counted(tarOf(false, "b"), 0, 1), false, ""},
		{"left out, not counted", Asked{Srcs: []string{"a", "b"}}, tarOf(false, "b"), false, "an archive of b"},
		{"two names for a file", Asked{Srcs: []string{"a", "b"}}, counted(tarOf(false, "a", "a"), 2, 0), false, "an archive of a, a"},
		{"counts past the names", Asked{Srcs: []string{"*", "b"}}, counted(tarOf(false, "a"), 1, 1), false, "an archive of a"},
		{"counts short of the names", Asked{Srcs: []string{"*", "b"}}, counted(tarOf(false, "a", "b", "c"), 1, 1), false, "an archive of a, b, c"},
		{"negative count", Asked{Srcs: []string{"*", "b"}}, counted(tarOf(false, "a", "b"), 2, -1), false, "an archive of a, b"},
		{"pattern", Asked{Srcs: []string{"d/*.txt"}}, counted(tarOf(false, "a.txt", "b.txt"), 2), false, ""},
		{"pattern of one", Asked{Srcs: []string{"d/*.txt"}}, tarOf(false, "a.txt"), false, ""},
		{"pattern and a file", Asked{Srcs: []string{"d/*.txt", "e/x"}}, counted(tarOf(false, "a.txt", "b.txt", "x"), 2, 1), false, ""},
		{"pattern, a name it does not match", Asked{Srcs: []string{"d/*.txt"}}, counted(tarOf(false, "a.txt", ".bashrc"), 2), false, ".bashrc"},
		{"pattern, a dot file", Asked{Srcs: []string{"d/*"}}, tarOf(false, ".ssh"), false, ".ssh"},
		{"dot pattern, a dot file", Asked{Srcs: []string{"d/.*rc"}}, tarOf(false, ".bashrc"), false, ""},
		{"pattern, a name counted for the file", Asked{Srcs: []string{"*.txt", "x"}}, counted(tarOf(false, "a.txt", "y"), 1, 1), false, "y"},
		{"pattern said single", Asked{Srcs: []string{"*.txt"}}, tarOf(true, "a.txt"), false, "an archive of a.txt"},
		// a pattern's one match is one source; a pattern that matches
		// nothing is the literal name (as OpenSSH's scp takes them)
		{"pattern's one match as a file", Asked{Srcs: []string{"*.txt"}}, file("a.txt"), false, ""},
		{"pattern's one match as a sparse file", Asked{Srcs: []string{"d/*.img"}}, proto.Contents{Mode: proto.ModeSparse, Name: "disk.img"}, false, ""},
		{"pattern as a file it does not match", Asked{Srcs: []string{"*.txt"}}, file(".bashrc"), false, ".bashrc"},
		{"pattern's one match said single, -r", Asked{Srcs: []string{"d/run*"}, Recursive: true}, tarOf(true, "run1"), false, ""},
		{"pattern's one match said single, another name", Asked{Srcs: []string{"d/run*"}, Recursive: true}, tarOf(true, ".ssh"), false, ".ssh"},
		{"pattern said single, two names", Asked{Srcs: []string{"d/run*"}, Recursive: true}, counted(tarOf(true, "run1", "run2"), 2), false, "an archive of run1, run2"},
		{"single said, no names", Asked{Srcs: []string{"dir"}, Recursive: true}, counted(tarOf(true), 0), false, "an archive of "},
		{"pattern said single among several", Asked{Srcs: []string{"run*", "b"}, Recursive: true}, counted(tarOf(true, "run1", "b"), 1, 1), false, "an archive of run1, b"},
		{"literal g[1] as a file", Asked{Srcs: []string{"d/g[1]"}}, file("g[1]"), false, ""},
		{"literal copy.glob[123] as a file", Asked{Srcs: []string{"copy.glob[123]"}}, file("copy.glob[123]"), false, ""},
		{"literal a*b as a file", Asked{Srcs: []string{"d/a*b"}}, file("a*b"), false, ""},
		{"literal q? as a file", Asked{Srcs: []string{"d/q?"}}, file("q?"), false, ""},
		{"literal g[1] in an archive", Asked{Srcs: []string{"d/g[1]"}}, tarOf(false, "g[1]"), false, ""},
		{"literal g[1] and a file", Asked{Srcs: []string{"d/g[1]", "x"}}, counted(tarOf(false, "g[1]", "x"), 1, 1), false, ""},
		{"literal among the matches", Asked{Srcs: []string{"*.txt"}}, counted(tarOf(false, "a.txt", "*.txt"), 2), false, ""},
		{"malformed pattern, its literal", Asked{Srcs: []string{"d/g[1"}}, file("g[1"), false, ""},
		{"lying: g[2] for g[1]", Asked{Srcs: []string{"d/g[1]"}}, file("g[2]"), false, "g[2]"},
		{"lying: g1x for g[1]", Asked{Srcs: []string{"d/g[1]"}}, file("g1x"), false, "g1x"},
		{"lying: .bashrc after the literal", Asked{Srcs: []string{"d/g[1]"}}, counted(tarOf(false, "g[1]", ".bashrc"), 2), false, ".bashrc"},
		{"lying: another pattern's literal", Asked{Srcs: []string{"d/g[1]", "e/h[2]"}}, counted(tarOf(false, "h[2]", "g[1]"), 1, 1), false, "h[2]"},
		{"lying: the literal of the directory", Asked{Srcs: []string{"d[1]/g*"}}, file("d[1]"), false, "d[1]"},
		{"lying: g1 for a malformed pattern", Asked{Srcs: []string{"d/g[1"}}, file("g1"), false, "g1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			names, err := tc.a.Check(tc.c, tc.newName && len(tc.a.Srcs) == 1)
			var u *proto.Unasked
			switch {
			case tc.claim == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.claim == "" && tc.c.Mode == proto.ModeTar && len(names) != len(tc.c.Names):
				t.Fatalf("names %q, want %q", names, tc.c.Names)
			case tc.claim != "" && (!errors.As(err, &u) || u.Claim != tc.claim):
				t.Fatalf("got %v, want the refusal of %q", err, tc.claim)
			}
		})
	}
}

// counted is c with counts.
func counted(c proto.Contents, counts ...int) proto.Contents {
	c.Counts = counts
	return c
}

// TestGlobMatch: a pattern matches as path.Match, but a leading dot only
// by a leading dot.
func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"*.txt", "a.txt", true}, {"*.txt", "a.log", false}, {"*", ".ssh", false}, {".*", ".ssh", true},
		{"?", "a", true}, {"[ab]", "b", true}, {"[", "[", false}, {"*", "a;b", true},
	} {
		if got := globMatch(tc.pattern, tc.name); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

// TestTakes: a pattern takes the names it matches and itself, the name
// the remote side sends when it matches nothing; no other name.
func TestTakes(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"g[1]", "g[1]", true}, {"g[1]", "g1", true}, {"g[1]", "g2", false}, {"g[1]", "g[2]", false},
		{"copy.glob[123]", "copy.glob[123]", true}, {"copy.glob[123]", "copy.glob2", true}, {"copy.glob[123]", "copy.glob[12]", false},
		{"a*b", "a*b", true}, {"q?", "q?", true}, {"q?", "qq", true}, {"q?", "q", false},
		{"g[1", "g[1", true}, {"g[1", "g1", false}, {"*", ".ssh", false}, {"*", "*", true}, {"*.txt", "*.TXT", false},
	} {
		if got := takes(tc.pattern, tc.name); got != tc.want {
			t.Errorf("takes(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

// TestExpand: patterns are expanded on this side, with what each source
// gave; a pattern that matches nothing, or is malformed, stays as the
// literal name (there, or missing).
func TestExpand(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.txt", "b.txt", ".c.txt", "d.log", "g[1]", "g[1"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srcs := []string{dir + "/*.txt", dir + "/d.log", dir + "/*.none", dir + "/g[1]", dir + "/g[1"}
	paths, from, err := Expand(srcs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{dir + "/a.txt", dir + "/b.txt", dir + "/d.log", dir + "/*.none", dir + "/g[1]", dir + "/g[1"}
	if !slices.Equal(paths, want) || !slices.Equal(from, []int{0, 0, 1, 2, 3, 4}) {
		t.Fatalf("got %q from %v, want %q from [0 0 1 2 3 4]", paths, from, want)
	}
	p, err := planCopy(paths, false, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Counts(from, len(srcs)); !slices.Equal(c, []int{2, 1, 0, 1, 1}) || len(p.Left) != 1 || p.Mode != proto.ModeTar {
		t.Fatalf("counts %v, left %v, mode %s; want [2 1 0 1 1], one left, tar", c, p.Left, p.Mode)
	}
}

// FuzzPlan feeds the remote side's status lines to proto.ParseStatus and the
// plans among them to the check of what a download of src asked for: no
// line panics, and a plan taken names only src's name as written, or for a
// pattern, names the pattern matches or the pattern itself.
func FuzzPlan(f *testing.F) {
	f.Add(`RDMACP plan {"mode":"file","name":"report.txt","size":5}`, "report.txt", false)
	f.Add(`RDMACP plan {"mode":"file","name":".bashrc"}`, "report.txt", false)
	f.Add(`RDMACP plan {"mode":"tar","single":true,"names":["dir"]}`, "d/dir/", true)
	f.Add(`RDMACP plan {"mode":"tar","single":true,"names":[".ssh"]}`, ".", true)
	f.Add(`RDMACP have {"block":1048576,"size":1,"hashes":["00000000000000000000000000000000"]}`, "x", false)
	f.Add(`RDMACP plan {"mode":"file","name":"g[1]"}`, "d/g[1]", false)
	f.Add(`RDMACP plan {"mode":"tar","names":["g[1]",".bashrc"],"counts":[2]}`, "d/g[1]", false)
	f.Fuzz(func(t *testing.T, line, src string, recursive bool) {
		st, err := proto.ParseStatus(line)
		if err != nil || st.Kind != "plan" {
			return
		}
		names, err := Asked{Srcs: []string{src}, Recursive: recursive}.Check(st.Contents, false)
		if err != nil {
			return
		}
		if isPattern(src) && st.Contents.Mode != proto.ModeTar {
			names = []string{st.Contents.Name}
		}
		if isPattern(src) {
			for _, name := range names {
				if !globMatch(path.Base(src), name) && name != path.Base(src) {
					t.Fatalf("%q taken for the pattern %q", line, src)
				}
			}
			return
		}
		want := AskedName(src)
		if want == "" {
			t.Fatalf("%q taken for %q, whose name only the remote side knows", line, src)
		}
		if st.Contents.Mode != proto.ModeTar && st.Contents.Name != want || st.Contents.Mode == proto.ModeTar && (len(names) != 1 || names[0] != want) {
			t.Fatalf("%q taken for %q", line, src)
		}
	})
}
