package cp

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/plan"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/tree"
)

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
		s, err := prepare(plan.Asked{Srcs: []string{"."}, Recursive: true}, c, dir+"/"+tc.dst, Options{Resume: tc.resume})
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
		s, err := prepare(plan.Asked{Srcs: []string{"*"}, Recursive: recursive}, c, t.TempDir()+"/", Options{})
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
