package plan

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/cp/tree"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestWalkFilter checks that the archive of a tree holds what the rules
// keep, with nothing of an excluded directory, and that a source the rules
// exclude is left out of the plan, as no failure.
func TestWalkFilter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, p := range []string{"t/a.o", "t/a.c", "t/build/x.c", "t/sub/keep.o", "t/sub/b.o", "t/sub/c.txt", "skip.o"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rs := &filter.Rules{}
	for _, r := range []string{"+ keep.o", "- *.o", "- build/", "- /t/sub/*.txt"} {
		if err := rs.Filter(r); err != nil {
			t.Fatal(err)
		}
	}
	p, err := planCopy([]string{filepath.Join(dir, "t"), filepath.Join(dir, "skip.o")}, true, false, rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Srcs) != 1 || p.LeftErr() != nil {
		t.Fatalf("planned %d sources (%v), want t alone, and no failure", len(p.Srcs), p.LeftErr())
	}
	var ar bytes.Buffer
	if err := tree.WriteTar(&ar, p.Sources(), io.Discard, nil, meta.Flags{}, nil); err != nil {
		t.Fatal(err)
	}
	got := tarNames(t, &ar)
	want := []string{"t/", "t/a.c", "t/sub/", "t/sub/keep.o"}
	if !slices.Equal(got, want) {
		t.Errorf("archive holds %q, want %q", got, want)
	}
	_, err = planCopy([]string{filepath.Join(dir, "skip.o")}, false, false, rs)
	if conn.KindOf(err) != conn.KindUsage {
		t.Errorf("a source the rules exclude: %v, want a usage error", err)
	}
}

// tarNames returns the names of the archive r's entries, sorted.
func tarNames(t *testing.T, r io.Reader) []string {
	t.Helper()
	tr := tar.NewReader(r)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	slices.Sort(names)
	return names
}
