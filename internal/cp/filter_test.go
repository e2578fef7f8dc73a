package cp

import (
	"archive/tar"
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestRequestFilter checks that the remote side takes a download's filter
// rules only when they are few and short enough and each one parses, and
// an upload's never.
func TestRequestFilter(t *testing.T) {
	t.Parallel()
	many := make([]string, filter.MaxRules+1)
	for i := range many {
		many[i] = "- x"
	}
	cases := []struct {
		name     string
		upload   bool
		rules    []string
		ok       bool
		contains string
	}{
		{name: "rules", rules: []string{"- *.o", "+ */", "exclude /a/**", "!"}, ok: true},
		{name: "as many as allowed", rules: many[1:], ok: true},
		{name: "too many", rules: many, contains: "more than"},
		{name: "too long", rules: []string{"- " + strings.Repeat("a", filter.MaxLen+1)}, contains: "longer than"},
		{name: "not a rule", rules: []string{"*.o"}, contains: "not a rule"},
		{name: "bad pattern", rules: []string{"- a["}, contains: "without its ]"},
		{name: "a merge", rules: []string{"merge /etc/shadow"}, contains: "merge"},
		{name: "a modifier", rules: []string{"-/ /etc"}, contains: "modifiers"},
		{name: "upload with rules", upload: true, rules: []string{"- x"}, contains: "filter rules"},
	}
	for _, tc := range cases {
		r := Request{Version: protocolVersion, Key: strings.Repeat("ab", keyLen), Transport: "auto", Timeout: time.Minute, Filter: tc.rules}
		if tc.upload {
			r.Dest, r.Contents = "/tmp", Contents{Mode: modeTar}
		} else {
			download(&r)
		}
		var b bytes.Buffer
		if err := writeRequest(&b, r); err != nil {
			t.Fatal(err)
		}
		_, err := readRequest(bufio.NewReaderSize(&b, 4096))
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), tc.contains) {
			t.Errorf("%s: got %v, want ok %v or an error with %q", tc.name, err, tc.ok, tc.contains)
		}
	}
}

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
	if len(p.srcs) != 1 || p.leftErr() != nil {
		t.Fatalf("planned %d sources (%v), want t alone, and no failure", len(p.srcs), p.leftErr())
	}
	var ar bytes.Buffer
	if err := writeTar(&ar, p.srcs, io.Discard, nil, meta.Flags{}, nil); err != nil {
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
