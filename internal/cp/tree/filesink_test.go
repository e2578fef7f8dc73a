package tree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestPartialFile follows a file sink's partial file: kept as an exact
// prefix when a stream fails, resumed by a copy of the same version of
// the source, removed for another version, locked against a second copy,
// and never opened through a planted link.
func TestPartialFile(t *testing.T) {
	dir := t.TempDir()
	req := proto.Request{Dest: dir, Contents: proto.Contents{Mode: proto.ModeFile, Name: "f", Perm: 0o644, Size: 10, Changed: 7}}
	s, err := newFileSink(req)
	if err != nil {
		t.Fatal(err)
	}
	s.Writer().Write([]byte("0123456789"))
	s.Abort(6) // six bytes were written in order
	if b, err := os.ReadFile(s.partial); err != nil || string(b) != "012345" {
		t.Fatalf("partial file: %q, %v; want the exact prefix", b, err)
	}

	req.Resume = true
	s, err = newFileSink(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newFileSink(req); err == nil || !strings.Contains(err.Error(), "another rdmacp is copying to it") {
		t.Fatalf("a second copy to the same file: %v", err)
	}
	o := proto.Offer{Block: proto.MinBlock, Size: 6}
	for _, at := range []int64{7, 4, -1} {
		if err := s.Start(at, o); err == nil {
			t.Fatalf("started at %d of a 6-byte offer", at)
		}
	}
	if err := s.Start(6, o); err != nil {
		t.Fatal(err)
	}
	s.Writer().Write([]byte("6789"))
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "0123456789" {
		t.Fatalf("resumed copy: %q, %v", b, err)
	}

	s, _ = newFileSink(req)
	s.Writer().Write([]byte("abc"))
	s.Abort(3)
	req.Changed = 8 // the source changed
	s, err = newFileSink(req)
	if err != nil || !s.stale {
		t.Fatalf("stale %v, %v; want the old partial file removed", s != nil && s.stale, err)
	}
	if o, _ := s.Offer(proto.NewKey()); len(o.Hashes) != 0 {
		t.Fatalf("offer %+v from a new partial file", o)
	}
	s.Abort(0)
	if m, _ := filepath.Glob(filepath.Join(dir, ".f.rdmacp-*")); len(m) != 0 {
		t.Fatalf("left behind: %v", m)
	}

	victim := testutil.WriteTemp(t, dir, "victim", []byte("keep me"))
	if err := os.Link(victim.Name(), partialName(filepath.Join(dir, "f"), req.Contents)); err != nil {
		t.Fatal(err)
	}
	if _, err := newFileSink(req); err == nil || !strings.Contains(err.Error(), "one link") {
		t.Fatalf("partial name hard-linked elsewhere: %v", err)
	}
	if b, _ := os.ReadFile(victim.Name()); string(b) != "keep me" {
		t.Fatalf("the linked file was changed: %q", b)
	}
}
