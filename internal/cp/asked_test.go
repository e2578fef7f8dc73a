package cp

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/tree"
)

func TestAskedName(t *testing.T) {
	for src, want := range map[string]string{
		"report.txt": "report.txt", "/data/w.bin": "w.bin", "dir/": "dir", "dir/.": "dir", "~/x": "x",
		"a/../b": "b", ".bashrc": ".bashrc", ".": "", "..": "", "~": "", "~/": "", "/": "", "a/..": "", "": "", "x/../..": "",
	} {
		if got := askedName(src); got != want {
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
		a       asked
		c       proto.Contents
		newName bool
		claim   string // "": taken
	}{
		{"file", asked{srcs: []string{"d/report.txt"}}, file("report.txt"), false, ""},
		{"file, -r", asked{srcs: []string{"report.txt"}, recursive: true}, file("report.txt"), false, ""},
		{"sparse file", asked{srcs: []string{"disk.img"}}, proto.Contents{Mode: proto.ModeSparse, Name: "disk.img"}, false, ""},
		{"file under another name", asked{srcs: []string{"report.txt"}}, file(".bashrc"), false, ".bashrc"},
		{"file for a directory", asked{srcs: []string{"."}, recursive: true}, file(".bashrc"), true, ".bashrc"},
		{"file for several sources", asked{srcs: []string{"a", "b"}}, file("a"), false, "a"},
		{"archive without -r", asked{srcs: []string{"report.txt"}}, tarOf(true, "report.txt"), false, "an archive of report.txt"},
		{"archive, -r", asked{srcs: []string{"dir/"}, recursive: true}, tarOf(true, "dir"), false, ""},
		{"archive of several files", asked{srcs: []string{"a", "x/b"}}, tarOf(false, "a", "b"), false, ""},
		{"archive of another name", asked{srcs: []string{"dir"}, recursive: true}, tarOf(true, ".ssh"), false, ".ssh"},
		{"archive with one more", asked{srcs: []string{"a", "b"}}, tarOf(false, "a", "b", ".ssh"), false, "an archive of a, b, .ssh"},
		{"archive with names swapped", asked{srcs: []string{"a", "b"}}, tarOf(false, "b", "a"), false, "b"},
		{"archive said single", asked{srcs: []string{"a", "b"}}, tarOf(true, "a", "b"), false, "an archive of a, b"},
		{"dot to a new name", asked{srcs: []string{"."}, recursive: true}, tarOf(true, "alice"), true, ""},
		{"dot into a directory", asked{srcs: []string{"."}, recursive: true}, tarOf(true, ".ssh"), false, ".ssh"},
		{"home into a directory", asked{srcs: []string{"~"}, recursive: true}, tarOf(true, "alice"), false, "alice"},
		{"dot among several", asked{srcs: []string{".", "b"}, recursive: true}, tarOf(false, ".ssh", "b"), true, ".ssh"},
		// a source left out, and patterns (see glob.go)
		{"one of two left out", asked{srcs: []string{"a", "b"}}, counted(tarOf(false, "b"), 0, 1), false, ""},
		{"left out, not counted", asked{srcs: []string{"a", "b"}}, tarOf(false, "b"), false, "an archive of b"},
		{"two names for a file", asked{srcs: []string{"a", "b"}}, counted(tarOf(false, "a", "a"), 2, 0), false, "an archive of a, a"},
		{"counts past the names", asked{srcs: []string{"*", "b"}}, counted(tarOf(false, "a"), 1, 1), false, "an archive of a"},
		{"counts short of the names", asked{srcs: []string{"*", "b"}}, counted(tarOf(false, "a", "b", "c"), 1, 1), false, "an archive of a, b, c"},
		{"negative count", asked{srcs: []string{"*", "b"}}, counted(tarOf(false, "a", "b"), 2, -1), false, "an archive of a, b"},
		{"pattern", asked{srcs: []string{"d/*.txt"}}, counted(tarOf(false, "a.txt", "b.txt"), 2), false, ""},
		{"pattern of one", asked{srcs: []string{"d/*.txt"}}, tarOf(false, "a.txt"), false, ""},
		{"pattern and a file", asked{srcs: []string{"d/*.txt", "e/x"}}, counted(tarOf(false, "a.txt", "b.txt", "x"), 2, 1), false, ""},
		{"pattern, a name it does not match", asked{srcs: []string{"d/*.txt"}}, counted(tarOf(false, "a.txt", ".bashrc"), 2), false, ".bashrc"},
		{"pattern, a dot file", asked{srcs: []string{"d/*"}}, tarOf(false, ".ssh"), false, ".ssh"},
		{"dot pattern, a dot file", asked{srcs: []string{"d/.*rc"}}, tarOf(false, ".bashrc"), false, ""},
		{"pattern, a name counted for the file", asked{srcs: []string{"*.txt", "x"}}, counted(tarOf(false, "a.txt", "y"), 1, 1), false, "y"},
		{"pattern said single", asked{srcs: []string{"*.txt"}}, tarOf(true, "a.txt"), false, "an archive of a.txt"},
		// a pattern's one match is one source; a pattern that matches
		// nothing is the literal name (as OpenSSH's scp takes them)
		{"pattern's one match as a file", asked{srcs: []string{"*.txt"}}, file("a.txt"), false, ""},
		{"pattern's one match as a sparse file", asked{srcs: []string{"d/*.img"}}, proto.Contents{Mode: proto.ModeSparse, Name: "disk.img"}, false, ""},
		{"pattern as a file it does not match", asked{srcs: []string{"*.txt"}}, file(".bashrc"), false, ".bashrc"},
		{"pattern's one match said single, -r", asked{srcs: []string{"d/run*"}, recursive: true}, tarOf(true, "run1"), false, ""},
		{"pattern's one match said single, another name", asked{srcs: []string{"d/run*"}, recursive: true}, tarOf(true, ".ssh"), false, ".ssh"},
		{"pattern said single, two names", asked{srcs: []string{"d/run*"}, recursive: true}, counted(tarOf(true, "run1", "run2"), 2), false, "an archive of run1, run2"},
		{"single said, no names", asked{srcs: []string{"dir"}, recursive: true}, counted(tarOf(true), 0), false, "an archive of "},
		{"pattern said single among several", asked{srcs: []string{"run*", "b"}, recursive: true}, counted(tarOf(true, "run1", "b"), 1, 1), false, "an archive of run1, b"},
		{"literal g[1] as a file", asked{srcs: []string{"d/g[1]"}}, file("g[1]"), false, ""},
		{"literal copy.glob[123] as a file", asked{srcs: []string{"copy.glob[123]"}}, file("copy.glob[123]"), false, ""},
		{"literal a*b as a file", asked{srcs: []string{"d/a*b"}}, file("a*b"), false, ""},
		{"literal q? as a file", asked{srcs: []string{"d/q?"}}, file("q?"), false, ""},
		{"literal g[1] in an archive", asked{srcs: []string{"d/g[1]"}}, tarOf(false, "g[1]"), false, ""},
		{"literal g[1] and a file", asked{srcs: []string{"d/g[1]", "x"}}, counted(tarOf(false, "g[1]", "x"), 1, 1), false, ""},
		{"literal among the matches", asked{srcs: []string{"*.txt"}}, counted(tarOf(false, "a.txt", "*.txt"), 2), false, ""},
		{"malformed pattern, its literal", asked{srcs: []string{"d/g[1"}}, file("g[1"), false, ""},
		{"lying: g[2] for g[1]", asked{srcs: []string{"d/g[1]"}}, file("g[2]"), false, "g[2]"},
		{"lying: g1x for g[1]", asked{srcs: []string{"d/g[1]"}}, file("g1x"), false, "g1x"},
		{"lying: .bashrc after the literal", asked{srcs: []string{"d/g[1]"}}, counted(tarOf(false, "g[1]", ".bashrc"), 2), false, ".bashrc"},
		{"lying: another pattern's literal", asked{srcs: []string{"d/g[1]", "e/h[2]"}}, counted(tarOf(false, "h[2]", "g[1]"), 1, 1), false, "h[2]"},
		{"lying: the literal of the directory", asked{srcs: []string{"d[1]/g*"}}, file("d[1]"), false, "d[1]"},
		{"lying: g1 for a malformed pattern", asked{srcs: []string{"d/g[1"}}, file("g1"), false, "g1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			names, err := tc.a.check(tc.c, tc.newName && len(tc.a.srcs) == 1)
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
	paths, from, err := expand(srcs)
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
	if c := p.counts(from, len(srcs)); !slices.Equal(c, []int{2, 1, 0, 1, 1}) || len(p.left) != 1 || p.mode != proto.ModeTar {
		t.Fatalf("counts %v, left %v, mode %s; want [2 1 0 1 1], one left, tar", c, p.left, p.mode)
	}
}

// TestPlanSendPattern: the remote side plans a lone pattern's one match,
// or the literal name it stands for, as one source (a file, under its
// name); several matches as an archive of them; nothing there as one
// missing source.
func TestPlanSendPattern(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"g[1]", "a.txt", "b.txt", "one.log"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		src  string
		want proto.Contents // its mode and name or names
	}{
		{"g[1]", proto.Contents{Mode: proto.ModeFile, Name: "g[1]"}},
		{"*.log", proto.Contents{Mode: proto.ModeFile, Name: "one.log"}},
		{"*.txt", proto.Contents{Mode: proto.ModeTar, Names: []string{"a.txt", "b.txt"}, Counts: []int{2}}},
		{"*.none", proto.Contents{}},
	} {
		p, in, c, err := planSend(proto.Request{Send: []string{dir + "/" + tc.src}}, io.Discard)
		if in != nil {
			in.Close()
		}
		switch {
		case tc.want.Mode == "" && err == nil:
			t.Errorf("%s: planned %+v, want no such file", tc.src, c)
		case tc.want.Mode == "":
		case err != nil:
			t.Errorf("%s: %v", tc.src, err)
		case c.Mode != tc.want.Mode || c.Name != tc.want.Name || !slices.Equal(c.Names, tc.want.Names) || !slices.Equal(c.Counts, tc.want.Counts) || c.Single || p.several != (c.Mode == proto.ModeTar):
			t.Errorf("%s: planned %+v (several %v), want %+v", tc.src, c, p.several, tc.want)
		}
	}
}

// TestPrepareUnknownName: a source whose name only the remote side knows
// (h:.) lands only as DST itself, a new name (or, resuming, the directory
// an interrupted copy to that new name made); into an existing directory
// it is refused.
func TestPrepareUnknownName(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "made"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := proto.Contents{Mode: proto.ModeTar, Single: true, Names: []string{".ssh"}}
	cases := []struct {
		dst     string
		resume  bool
		wantTop string // "": refused
	}{
		{"new", false, "new"},
		{"made", false, ""},
		{"made", true, "made"},
		{"made/", true, ""},
		{".", true, ""},
		{"made/.", true, ""},
	}
	for _, tc := range cases {
		s, err := prepare(asked{srcs: []string{"."}, recursive: true}, c, dir+"/"+tc.dst, Options{Resume: tc.resume})
		var u *proto.Unasked
		switch {
		case tc.wantTop == "" && !errors.As(err, &u):
			t.Errorf("%s (resume %v): got %v, want a refusal", tc.dst, tc.resume, err)
		case tc.wantTop == "":
		case err != nil:
			t.Errorf("%s (resume %v): %v", tc.dst, tc.resume, err)
		case s.(*tree.TarSink).LocalName(".ssh") != tc.wantTop || s.(*tree.TarSink).Dir() != dir:
			t.Errorf("%s (resume %v): into %s as %q, want %s as %q", tc.dst, tc.resume, s.(*tree.TarSink).Dir(), s.(*tree.TarSink).LocalName(".ssh"), dir, tc.wantTop)
		}
		if s != nil {
			s.Abort(0)
		}
	}
}

// TestPrepareWithoutR: a download's archive asked for without -r (several
// sources, or a pattern) is extracted taking only files; with -r, trees.
func TestPrepareWithoutR(t *testing.T) {
	t.Parallel()
	c := proto.Contents{Mode: proto.ModeTar, Names: []string{"a", "b"}, Counts: []int{2}}
	for _, recursive := range []bool{false, true} {
		s, err := prepare(asked{srcs: []string{"*"}, recursive: recursive}, c, t.TempDir()+"/", Options{})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755})
		tw.Close()
		s.Writer().Write(b.Bytes()) // refused or not, Finish says
		var u *proto.Unasked
		if err := s.Finish(); errors.As(err, &u) == recursive {
			t.Errorf("with -r %v: a directory: %v", recursive, err)
		}
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
		names, err := asked{srcs: []string{src}, recursive: recursive}.check(st.Contents, false)
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
		want := askedName(src)
		if want == "" {
			t.Fatalf("%q taken for %q, whose name only the remote side knows", line, src)
		}
		if st.Contents.Mode != proto.ModeTar && st.Contents.Name != want || st.Contents.Mode == proto.ModeTar && (len(names) != 1 || names[0] != want) {
			t.Fatalf("%q taken for %q", line, src)
		}
	})
}
