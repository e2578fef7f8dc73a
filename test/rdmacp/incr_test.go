package rdmacp

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// incrFiles is how many files incrTree makes, each incrSize bytes or so,
// and incrEntries how many entries its tree has.
const (
	incrFiles   = 40
	incrSize    = 20 << 10
	incrEntries = incrFiles + 3
)

// incrOld is the time of incrTree's entries.
var incrOld = time.Date(2010, 1, 2, 3, 4, 5, 600, time.UTC)

// incrTree makes under dir the tree t: incrFiles files in t and t/sub,
// each of its own size, a link, and old times; it returns dir/t.
func incrTree(t *testing.T, dir string) string {
	t.Helper()
	top := filepath.Join(dir, "t")
	if err := os.MkdirAll(filepath.Join(top, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range incrFiles {
		p := filepath.Join(top, fmt.Sprintf("f%02d", i))
		if i%2 == 1 {
			p = filepath.Join(top, "sub", fmt.Sprintf("f%02d", i))
		}
		writeFile(t, p, strings.Repeat(strconv.Itoa(i%10), incrSize+i))
		os.Chtimes(p, incrOld, incrOld)
	}
	if err := os.Symlink("f00", filepath.Join(top, "link")); err != nil {
		t.Fatal(err)
	}
	oldDirs(top)
	return top
}

// oldDirs gives the directories of incrTree at top their old times again.
func oldDirs(top string) {
	for _, d := range []string{filepath.Join(top, "sub"), top} {
		os.Chtimes(d, incrOld, incrOld)
	}
}

// incrRun is one rdmacp run's exit code, stderr, stdout, and the bytes
// its -v summary says the stream carried (-1 if none).
type incrRun struct {
	run
	stdout string
	bytes  int64
}

// summaryBytes finds the byte count of a -v summary.
var summaryBytes = regexp.MustCompile(`rdmacp: (\d+) bytes in `)

// incrCopy runs rdmacp -v with args against s.
func (s *sshd) incrCopy(t *testing.T, args ...string) incrRun {
	t.Helper()
	cmd := s.command(t, append([]string{"-v"}, args...)...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	r := incrRun{run: finish(t, cmd), stdout: stdout.String(), bytes: -1}
	if m := summaryBytes.FindStringSubmatch(r.stderr); m != nil {
		r.bytes, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return r
}

// incrDirs are the two ways of an incremental copy: the arguments that
// copy the tree src to the directory dst.
var incrDirs = []struct {
	name string
	args func(src, dst string) []string
	verb string // itemize's first letter for a file sent
}{
	{"upload", func(src, dst string) []string { return []string{src, "target:" + dst + "/"} }, "<"},
	{"download", func(src, dst string) []string { return []string{"target:" + src, dst + "/"} }, ">"},
}

// TestIncrementalCopy copies a tree with -a three times, both ways: the
// second copy, of an unchanged tree, moves no file data; after one file
// changed, that file is the only one sent, and itemized as rsync does.
func TestIncrementalCopy(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	for _, way := range incrDirs {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			src, dst := incrTree(t, t.TempDir()), t.TempDir()
			first := s.incrCopy(t, append([]string{"-a"}, way.args(src, dst)...)...)
			if first.code != 0 || first.bytes < incrFiles*incrSize {
				t.Fatalf("first copy: exit %d, %d bytes: %s", first.code, first.bytes, first.stderr)
			}
			sameTree(t, src, filepath.Join(dst, "t"), func(m fs.FileMode) fs.FileMode { return m })
			again := s.incrCopy(t, append([]string{"-a", "--itemize-changes"}, way.args(src, dst)...)...)
			if again.code != 0 || again.bytes < 0 || again.bytes >= incrSize || again.stdout != "" {
				t.Fatalf("copy of an unchanged tree: exit %d, %d bytes, changes %q: %s", again.code, again.bytes, again.stdout, again.stderr)
			}
			changed := filepath.Join(src, "sub", "f07")
			writeFile(t, changed, "changed")
			third := s.incrCopy(t, append([]string{"-a", "--itemize-changes"}, way.args(src, dst)...)...)
			want := way.verb + "f.st...... t/sub/f07\n"
			if third.code != 0 || third.bytes >= incrSize || third.stdout != want {
				t.Fatalf("after one file changed: exit %d, %d bytes, changes %q, want %q: %s", third.code, third.bytes, third.stdout, want, third.stderr)
			}
			sameTree(t, src, filepath.Join(dst, "t"), func(m fs.FileMode) fs.FileMode { return m })
			noStrays(t)
		})
	}
}

// deleteDest makes, in dst, the tree a copy of t finds there: a copy of
// src, with extra files and directories in it, a link to a directory
// outside with a file of the same name as one in t/sub, and a directory
// beside t; it returns the extras' names and the paths that must stay.
func deleteDest(t *testing.T, src, dst string) (extras, stay []string) {
	t.Helper()
	top := incrTree(t, dst)
	outside := filepath.Join(dst, "outside")
	os.Mkdir(outside, 0o755)
	writeFile(t, filepath.Join(outside, "x"), "mine")
	os.Mkdir(filepath.Join(dst, "beside"), 0o755)
	writeFile(t, filepath.Join(dst, "beside", "y"), "mine")
	os.Symlink(outside, filepath.Join(top, "linked"))
	writeFile(t, filepath.Join(top, "extra"), "x")
	os.MkdirAll(filepath.Join(top, "gone", "deep"), 0o755)
	writeFile(t, filepath.Join(top, "gone", "deep", "z"), "z")
	writeFile(t, filepath.Join(top, "sub", "extra"), "x")
	oldDirs(top)
	extras = []string{"t/extra", "t/gone", "t/gone/deep", "t/gone/deep/z", "t/linked", "t/sub/extra"}
	return extras, []string{"outside/x", "beside/y", "t/sub/f07", "t/f00"}
}

// TestIncrementalDelete copies a tree with -a --delete both ways into a
// copy of it with extras: exactly the extras go (a link to a directory,
// not what is in it), nothing beside the tree, and -n first lists them
// and changes nothing.
func TestIncrementalDelete(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	for _, way := range incrDirs {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			src, dst := incrTree(t, t.TempDir()), t.TempDir()
			extras, stay := deleteDest(t, src, dst)
			before := snapshot(t, dst)
			dry := s.incrCopy(t, append([]string{"-a", "--delete", "-n", "--itemize-changes"}, way.args(src, dst)...)...)
			var want []string
			for _, e := range extras {
				fi, _ := os.Lstat(filepath.Join(dst, e))
				switch {
				case fi.IsDir():
					want = append(want, "*deleting   "+e+"/")
				case fi.Mode()&fs.ModeSymlink != 0:
					target, _ := os.Readlink(filepath.Join(dst, e))
					want = append(want, "*deleting   "+e+" -> "+target)
				default:
					want = append(want, "*deleting   "+e)
				}
			}
			got := strings.Split(strings.TrimSpace(dry.stdout), "\n")
			slices.Sort(got)
			slices.Sort(want)
			if dry.code != 0 || !slices.Equal(got, want) {
				t.Fatalf("-n: exit %d, changes %q, want %q: %s", dry.code, got, want, dry.stderr)
			}
			if after := snapshot(t, dst); !mapsEqual(before, after) {
				t.Fatalf("-n changed the destination: %v, was %v", after, before)
			}
			r := s.incrCopy(t, append([]string{"-a", "--delete"}, way.args(src, dst)...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for _, e := range extras {
				if _, err := os.Lstat(filepath.Join(dst, e)); err == nil {
					t.Errorf("%s: still there", e)
				}
			}
			for _, p := range stay {
				if _, err := os.Lstat(filepath.Join(dst, p)); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
			sameTree(t, src, filepath.Join(dst, "t"), func(m fs.FileMode) fs.FileMode { return m })
			noStrays(t)
		})
	}
}

// TestIncrementalDeleteExcluded copies a tree with -a --delete and an
// exclude rule, both ways, into a copy of it with extras: what the rule
// excludes stays, in the destination as in the source (rsync without
// --delete-excluded), and the other extras go; then with
// --delete-excluded, which removes what the rule excludes as well.
func TestIncrementalDeleteExcluded(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	for _, way := range incrDirs {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			src, dst := incrTree(t, t.TempDir()), t.TempDir()
			extras, _ := deleteDest(t, src, dst)
			writeFile(t, filepath.Join(dst, "t", "sub", "local.keep"), "mine")
			writeFile(t, filepath.Join(src, "sub", "f07.keep"), "not sent")
			r := s.incrCopy(t, append([]string{"-a", "--delete", "--exclude", "*.keep", "--exclude", "gone/"}, way.args(src, dst)...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for _, e := range extras {
				_, err := os.Lstat(filepath.Join(dst, e))
				if kept := strings.HasPrefix(e, "t/gone"); kept != (err == nil) {
					t.Errorf("%s: excluded %v, yet %v", e, kept, err)
				}
			}
			if b, err := os.ReadFile(filepath.Join(dst, "t", "sub", "local.keep")); err != nil || string(b) != "mine" {
				t.Errorf("the excluded local.keep: %q, %v", b, err)
			}
			if _, err := os.Lstat(filepath.Join(dst, "t", "sub", "f07.keep")); err == nil {
				t.Error("the excluded f07.keep was sent")
			}
			r = s.incrCopy(t, append([]string{"-a", "--delete-excluded", "--exclude", "*.keep", "--exclude", "gone/"}, way.args(src, dst)...)...)
			if r.code != 0 {
				t.Fatalf("--delete-excluded: exit %d: %s", r.code, r.stderr)
			}
			for _, e := range append(extras, "t/sub/local.keep") {
				if _, err := os.Lstat(filepath.Join(dst, e)); err == nil {
					t.Errorf("--delete-excluded: %s still there", e)
				}
			}
			noStrays(t)
		})
	}
}

// mapsEqual says whether a and b hold the same.
func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// listingFilter is the remote command of a lying download's remote side:
// the real rdmacp, whose listing of incrTree a sed program changes as
// prog says, with an honest count of the entries then, n, in its "listed"
// line.
func listingFilter(t *testing.T, prog string, n int) string {
	script := filepath.Join(t.TempDir(), "lying")
	sed := fmt.Sprintf(`%s; s/^RDMACP listed .*/RDMACP listed %d/`, prog, n)
	writeFile(t, script, "#!/bin/sh\n"+bin+" \"$@\" | sed -u '"+sed+"'\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// TestIncrementalLyingRemote downloads with -a --delete from a remote side
// whose listing lies: one that leaves out everything under t deletes
// nothing beside t nor through the link in it, and entries named outside
// t (.., absolute, another name) are refused with exit 9, and one with
// marks that are not digests with exit 3, nothing deleted.
func TestIncrementalLyingRemote(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	inject := func(name string) string {
		return `s|^RDMACP listed .*|RDMACP entry f 0 0 0 - -,-,-,- "` + name + `"\n&|`
	}
	cases := []struct {
		name, prog string
		n, code    int
	}{
		{"fewer entries", `/^RDMACP entry .* "t\//d`, 1, 0},
		{"..", inject("t/../beside/y"), incrEntries + 1, 9},
		{"absolute", inject("/etc/passwd"), incrEntries + 1, 9},
		{"another name", inject("beside/y"), incrEntries + 1, 9},
		{"a slash too many", inject("t//extra"), incrEntries + 1, 9},
		{"marks not hex", `s|^RDMACP listed .*|RDMACP entry f 0 0 0 - -,-,-,zz "t/x"\n&|`, incrEntries + 1, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src, dst := incrTree(t, t.TempDir()), t.TempDir()
			_, stay := deleteDest(t, src, dst)
			before := snapshot(t, dst)
			r := s.incrCopy(t, "--remote-cmd", listingFilter(t, tc.prog, tc.n), "-a", "--delete", "target:"+src, dst+"/")
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d: %s", r.code, tc.code, r.stderr)
			}
			for _, p := range stay {
				if _, err := os.Lstat(filepath.Join(dst, p)); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
			if after := snapshot(t, dst); tc.code != 0 && !mapsEqual(before, after) {
				t.Errorf("a refused listing changed the destination: %v, was %v", after, before)
			}
			noStrays(t)
		})
	}
}

// TestIncrementalUsage checks that what a mode cannot do is refused,
// exit 2, before anything is copied.
func TestIncrementalUsage(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	file := filepath.Join(src, "f")
	writeFile(t, file, "x")
	dst := t.TempDir()
	for _, args := range [][]string{
		{"-u", file, "target:" + dst},
		{"--delete", "-r", "target:" + src, "target:" + dst},
		{"-n", "--to", "target", "-r", src, dst},
		{"-a", "-C", src, "target:" + dst},
		{"-c", "--size-only", "-r", src, "target:" + dst},
	} {
		if r := s.rdmacp(t, args...); r.code != 2 {
			t.Errorf("%q: exit %d, want 2: %s", args, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 0 {
		t.Errorf("copied: %v", entries)
	}
}

// TestIncrementalHardLinks copies a tree with -a -H both ways, then
// again after a new name was linked to one of its unchanged files, and
// after another file got a second name in another directory: at the
// destination each new name is a link of the file it links at the source.
func TestIncrementalHardLinks(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	for _, way := range incrDirs {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			src, dst := incrTree(t, t.TempDir()), t.TempDir()
			args := append([]string{"-a", "-H"}, way.args(src, dst)...)
			if r := s.incrCopy(t, args...); r.code != 0 {
				t.Fatalf("first copy: exit %d: %s", r.code, r.stderr)
			}
			for _, l := range [][2]string{{"f00", "f00.link"}, {"sub/f01", "f01.link"}} {
				if err := os.Link(filepath.Join(src, l[0]), filepath.Join(src, l[1])); err != nil {
					t.Fatal(err)
				}
			}
			oldDirs(src)
			if r := s.incrCopy(t, args...); r.code != 0 {
				t.Fatalf("after the links: exit %d: %s", r.code, r.stderr)
			}
			for _, l := range [][2]string{{"f00", "f00.link"}, {"sub/f01", "f01.link"}} {
				a, errA := os.Stat(filepath.Join(dst, "t", l[0]))
				b, errB := os.Stat(filepath.Join(dst, "t", l[1]))
				if errA != nil || errB != nil || !os.SameFile(a, b) {
					t.Errorf("%s and %s are not one file at the destination (%v, %v)", l[0], l[1], errA, errB)
				}
			}
			sameTree(t, src, filepath.Join(dst, "t"), func(m fs.FileMode) fs.FileMode { return m })
		})
	}
}
