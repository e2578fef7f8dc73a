package rdmacp

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// filterCases are rule sets, as rdmacp's flags, and exactly what each
// lets land of filterTree's proj and junk.o, copied with -r.
var filterCases = []struct {
	name  string
	flags []string
	lands []string
}{
	{"exclude and include", []string{"--include", "keep.o", "--exclude", "*.o", "--exclude=build/", "--exclude", "/proj/sub/*.txt"},
		[]string{"proj", "proj/keep.o", "proj/main.go", "proj/sub", "proj/sub/x.go"}},
	{"only go files", []string{"--include=*/", "--include=*.go", "--exclude=*"},
		[]string{"proj", "proj/build", "proj/main.go", "proj/sub", "proj/sub/x.go"}},
	{"filter rules", []string{"--filter", "- **/sub", "--filter=exclude_*.o"},
		[]string{"proj", "proj/build", "proj/build/out.bin", "proj/main.go"}},
}

// filterTree makes, under dir, the tree proj and the file junk.o.
func filterTree(t *testing.T, dir string) {
	t.Helper()
	for _, p := range []string{"proj/main.go", "proj/main.o", "proj/keep.o", "proj/build/out.bin", "proj/sub/x.go", "proj/sub/y.o", "proj/sub/notes.txt", "junk.o"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, p), p)
	}
}

// TestFilterUpload uploads a tree and a file with rsync's include and
// exclude rules: exactly what they keep lands.
func TestFilterUpload(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	filterTree(t, src)
	for _, tc := range filterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := t.TempDir()
			args := append(append([]string{"-r"}, tc.flags...), filepath.Join(src, "proj"), filepath.Join(src, "junk.o"), "target:"+dst)
			if r := s.rdmacp(t, args...); r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			landed(t, src, dst, tc.lands)
			noStrays(t)
		})
	}
}

// TestFilterDownload downloads a tree and a file with the same rules: the
// remote side walks by them, and exactly what they keep lands.
func TestFilterDownload(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	filterTree(t, src)
	for _, tc := range filterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := t.TempDir()
			args := append(append([]string{"-r"}, tc.flags...), "target:"+filepath.Join(src, "proj"), "target:"+filepath.Join(src, "junk.o"), dst)
			if r := s.rdmacp(t, args...); r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			landed(t, src, dst, tc.lands)
			noStrays(t)
		})
	}
}

// TestFilterRefused checks that rules rdmacp does not support, and a copy
// whose every source is excluded, are usage errors (exit 2), named.
func TestFilterRefused(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "f.o")
	writeFile(t, src, "x")
	for _, tc := range []struct {
		flags []string
		says  string
	}{
		{[]string{"--filter", "dir-merge .rules"}, "not supported"},
		{[]string{"--filter", "-p *.o"}, "modifiers"},
		{[]string{"--exclude", "a["}, "without its ]"},
		{[]string{"--exclude-from", filepath.Join(t.TempDir(), "none")}, "no such file"},
		{[]string{"--exclude", "*.o"}, "exclude every source"},
	} {
		r := finish(t, rdmacpCommand(t, append(tc.flags, src, "nohost.invalid:/tmp/")...))
		if r.code != 2 || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("%q: exit %d, want 2 saying %q: %s", tc.flags, r.code, tc.says, r.stderr)
		}
	}
}

// landed checks that dst holds exactly the paths lands, each file as its
// source under src.
func landed(t *testing.T, src, dst string, lands []string) {
	t.Helper()
	var got []string
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dst {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		got = append(got, rel)
		if !d.IsDir() && hashFile(t, p) != hashFile(t, filepath.Join(src, rel)) {
			t.Errorf("%s: content differs", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, lands) {
		t.Errorf("landed %q, want %q", got, lands)
	}
}
