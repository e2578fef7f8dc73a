package filter

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rsyncTree is the tree the rule sets of TestAgainstRsync are tried on,
// under src: directories end in '/'.
var rsyncTree = []string{
	"a.o", "a.c", "keep.o", "foo.txt", "[x]", "a b", ".hidden",
	"build/", "build/out.o", "build/sub/", "build/sub/deep.c",
	"foo/", "foo/bar", "foo/a/", "foo/a/bar", "foo/a/b/", "foo/a/b/bar",
	"lib/", "lib/x.go", "lib/x_test.go", "lib/foo", "lib/build", "lib/tmp/", "lib/tmp/t.c",
	"tmp/", "tmp/cache/", "tmp/cache/c.o", "doc/", "doc/README", "doc/Readme.md",
}

// rsyncCases are rule sets, as rsync's options, each compared with rsync.
var rsyncCases = [][]string{
	{"--exclude=*.o"},
	{"--exclude=build/"},
	{"--exclude=build"},
	{"--exclude=/src/foo"},
	{"--exclude=foo"},
	{"--exclude=foo/"},
	{"--exclude=/src/*.c"},
	{"--exclude=/src/**.c"},
	{"--exclude=**.c"},
	{"--exclude=foo/*/bar"},
	{"--exclude=/src/foo/**/bar"},
	{"--exclude=a/bar"},
	{"--exclude=tmp/***"},
	{"--exclude=src/lib/**"},
	{"--exclude=lib/*"},
	{"--exclude=?.?"},
	{"--exclude=[[]x]"},
	{"--exclude=[!ab]*"},
	{"--exclude=*[[:upper:]]*"},
	{"--exclude=a b"},
	{"--exclude=.*"},
	{"--include=keep.o", "--exclude=*.o"},
	{"--exclude=*.o", "--include=keep.o"},
	{"--include=*/", "--include=*.c", "--exclude=*"},
	{"--include=*/", "--include=*.go", "--exclude=*_test.go", "--exclude=*"},
	{"--include=/src/", "--include=/src/lib/", "--include=/src/lib/x.go", "--exclude=*"},
	{"--filter=- *.o", "--filter=+ tmp/", "--filter=- tmp/*"},
	{"--filter=exclude build", "--filter=include_*.c"},
	{"--exclude=+ keep.o", "--exclude=*.o"},
	{"--exclude=*.o", "--exclude=!", "--exclude=foo"},
	{"--filter=- *", "--filter=clear", "--filter=-_*.txt"},
	{"--exclude=/src/build/sub/"},
	{"--exclude=*/"},
	{"--exclude=src"},
}

// TestAgainstRsync checks that what the rules keep of a tree is what
// rsync -a keeps of it with the same options. Without rsync it is
// skipped, unless RDMAPIPE_STRICT is set.
func TestAgainstRsync(t *testing.T) {
	t.Parallel()
	rsync, err := exec.LookPath("rsync")
	if err != nil {
		if os.Getenv("RDMAPIPE_STRICT") != "" {
			t.Fatalf("rsync: %v (RDMAPIPE_STRICT is set; scripts/deps.sh installs it)", err)
		}
		t.Skipf("rsync: %v", err)
	}
	root := t.TempDir()
	for _, p := range rsyncTree {
		makeEntry(t, filepath.Join(root, "src", p), strings.HasSuffix(p, "/"))
	}
	rules := filepath.Join(root, "rules")
	if err := os.WriteFile(rules, []byte("# comment\n\n+ keep.o\n- *.o\nmerge "+filepath.Join(root, "more")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "more"), []byte("- doc/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	excl := filepath.Join(root, "excl")
	if err := os.WriteFile(excl, []byte("; comment\nfoo\n+ lib/\n- lib\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := append(rsyncCases, []string{"--filter=merge " + rules}, []string{"--filter=. " + rules, "--exclude=foo"}, []string{"--exclude-from=" + excl})
	for _, args := range cases {
		want := rsyncKeeps(t, rsync, root, args)
		if got := ourKeeps(t, root, args); !slices.Equal(got, want) {
			t.Errorf("%q:\n rsync keeps %q\n we keep     %q", args, want, got)
		}
	}
}

// makeEntry makes the file, or directory if dir, p.
func makeEntry(t *testing.T, p string, dir bool) {
	t.Helper()
	if dir {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rsyncKeeps returns, sorted, the paths that rsync -a with args would
// send of root/src to a new directory.
func rsyncKeeps(t *testing.T, rsync, root string, args []string) []string {
	t.Helper()
	cmd := exec.Command(rsync, append(append([]string{"-a", "--dry-run", "--out-format=%n"}, args...), "src", filepath.Join(root, "dst")+"/")...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rsync %q: %v\n%s", args, err, out)
	}
	var kept []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			kept = append(kept, strings.TrimSuffix(l, "/"))
		}
	}
	slices.Sort(kept)
	return kept
}

// ourKeeps returns, sorted, the paths of root/src that the rules of args
// keep, named as rsync names them, an excluded directory not entered.
func ourKeeps(t *testing.T, root string, args []string) []string {
	t.Helper()
	rs := &Rules{}
	adds := map[string]func(string) error{"--exclude": rs.Exclude, "--include": rs.Include, "--filter": rs.Filter, "--exclude-from": rs.ExcludeFrom}
	for _, a := range args {
		flag, v, _ := strings.Cut(a, "=")
		if err := adds[flag](v); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
	}
	var kept []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		name, _ := filepath.Rel(root, p)
		if !strings.HasPrefix(name, "src") || name != "src" && !strings.HasPrefix(name, "src/") {
			return skip(d)
		}
		if rs.Match(name, d.IsDir()) {
			return skip(d)
		}
		kept = append(kept, name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(kept)
	return kept
}

// skip leaves d out of a walk: all of it, if it is a directory.
func skip(d fs.DirEntry) error {
	if d.IsDir() {
		return filepath.SkipDir
	}
	return nil
}
