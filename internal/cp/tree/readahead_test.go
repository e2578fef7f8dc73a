package tree

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// flatTree makes n files of size bytes, f000 on, in a new directory.
func flatTree(t *testing.T, n, size int) string {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		b := bytes.Repeat([]byte{byte(i)}, size)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestReadAheadOrder checks that the read-ahead hands over every entry of
// the sources in the walk's order, each source's directories before the
// rest, small files with their data and the others without.
func TestReadAheadOrder(t *testing.T) {
	src := t.TempDir()
	files := map[string]int{"a/x": 10, "a/b/y": 0, "a/b/z": aheadFile, "c": aheadFile + 1, "d/e/f": 3000}
	for name, size := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte(name), size)[:size], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("c", filepath.Join(src, "a/link")); err != nil {
		t.Fatal(err)
	}
	other := flatTree(t, 3*aheadBatch+5, 5) // several batches
	var want []string
	for _, s := range []Source{{Path: src, Name: "tree"}, {Path: other, Name: "flat"}} {
		for _, dirs := range []bool{true, false} {
			filepath.WalkDir(s.Path, func(p string, d fs.DirEntry, err error) error {
				if rel, _ := filepath.Rel(s.Path, p); d.IsDir() == dirs {
					want = append(want, filepath.Join(s.Name, rel))
				}
				return err
			})
		}
	}
	r := newReadAhead([]Source{{Path: src, Name: "tree"}, {Path: other, Name: "flat"}}, nil)
	defer r.close()
	var got []string
	for e, ok := r.next(); ok; e, ok = r.next() {
		if e.err != nil {
			t.Fatal(e.err)
		}
		got = append(got, e.name)
		disk, _ := os.ReadFile(e.path)
		small := e.fi.Mode().IsRegular() && e.fi.Size() <= aheadFile
		if small != (e.data != nil) || small && !bytes.Equal(e.data, disk) {
			t.Errorf("%s: %d bytes read ahead, want the file's %d (small %v)", e.name, len(e.data), len(disk), small)
		}
		r.release(e)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("entries\n%v\nwant the walk's\n%v", got, want)
	}
	if n := len(r.free); n != aheadBufs {
		t.Fatalf("%d of the %d buffers back after the last entry", n, aheadBufs)
	}
}

// TestReadAheadBounded checks that the read-ahead holds at most
// aheadBufs files' data, however far behind the archiver is: with the
// archiver taking nothing, it reads until every buffer of its pool holds
// a file, and then only into buffers given back.
func TestReadAheadBounded(t *testing.T) {
	const size = 4096
	r := newReadAhead([]Source{{Path: flatTree(t, 3*aheadBufs, size), Name: "t"}}, nil)
	defer r.close()
	testutil.WaitFor(t, time.Minute, "the read-ahead to fill its buffers", func() bool { return len(r.free) == 0 })
	n := 0
	for e, ok := r.next(); ok; e, ok = r.next() {
		if e.data != nil && cap(e.buf) != aheadFile+1 {
			t.Fatalf("entry %d: data in a buffer of %d bytes, not one of the pool's", n, cap(e.buf))
		}
		r.release(e)
		n++
	}
	if n != 3*aheadBufs+1 {
		t.Fatalf("%d entries, want %d", n, 3*aheadBufs+1)
	}
	if len(r.free) != aheadBufs {
		t.Fatalf("%d of the %d buffers back", len(r.free), aheadBufs)
	}
}

// TestReadAheadVanished checks that a file removed after its directory
// was read, while the archiver is behind, fails WriteTar as it would
// without read-ahead, with the entries before it in order (those still
// in WriteTar's buffer are not written: the stream fails).
func TestReadAheadVanished(t *testing.T) {
	const n = 400 // an archive of more than tarBuf: WriteTar blocks on the pipe
	src := flatTree(t, n, 4096)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- WriteTar(pw, []Source{{Path: src, Name: "t"}}, io.Discard, nil, meta.Flags{}, nil) }()
	first := make([]byte, 1)
	if _, err := io.ReadFull(pr, first); err != nil {
		t.Fatal(err)
	}
	last := filepath.Join(src, fmt.Sprintf("f%03d", n-1))
	if err := os.Remove(last); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(io.MultiReader(bytes.NewReader(first), pr))
	go func() { pw.CloseWithError(<-done) }()
	for i := -1; ; i++ {
		h, err := tr.Next()
		if err != nil {
			if want := fmt.Sprintf("lstat %s: no such file or directory", last); err.Error() != want {
				t.Fatalf("after %d files: %v, want %s", i, err, want)
			}
			return
		}
		want := "t/"
		if i >= 0 {
			want = fmt.Sprintf("t/f%03d", i)
		}
		if h.Name != want || i == n-1 {
			t.Fatalf("entry %q, want %q before the failure", h.Name, want)
		}
	}
}

// TestReadWholeErrors checks that readWhole fails as os.Open and reading
// its file would.
func TestReadWholeErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	_, want := os.Open(missing)
	if _, err := readWhole(missing, make([]byte, 10)); err == nil || err.Error() != want.Error() || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readWhole of a missing file: %v, want %v", err, want)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, want = f.Read(make([]byte, 10))
	if _, err := readWhole(dir, make([]byte, 10)); err == nil || err.Error() != want.Error() {
		t.Errorf("readWhole of a directory: %v, want %v", err, want)
	}
}

// TestReadWhole reads files into a buffer one byte longer than their size
// as stat'ed: each whole, one grown since with one byte more (the sign of
// a change), one shrunk with what it still has.
func TestReadWhole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		name                string
		size, statted, want int
	}{{"as stat'ed", 100, 100, 100}, {"empty", 0, 0, 0}, {"grown", 110, 100, 101}, {"shrunk", 60, 100, 60}} {
		data := bytes.Repeat([]byte{'d'}, c.size)
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, c.statted+1)
		if n, err := readWhole(p, b); n != c.want || err != nil || !bytes.Equal(b[:n], data[:n]) {
			t.Errorf("%s: read %d bytes, %v; want the first %d", c.name, n, err, c.want)
		}
	}
}

// TestReadAheadOffered checks that a small file the receiving side offered
// is not read ahead but resumed from where the offer stops matching, and
// one not offered is sent whole.
func TestReadAheadOffered(t *testing.T) {
	key := proto.NewKey()
	body := bytes.Repeat([]byte("0123456789"), 300)
	src := t.TempDir()
	for _, name := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(src, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o, err := proto.MakeOffer(testutil.WriteTemp(t, t.TempDir(), "partial", body[:1500]), 1500, key, "t/a", proto.MaxHashes)
	if err != nil {
		t.Fatal(err)
	}
	rs := &Resumption{have: map[string]proto.Offer{}, names: []string{"t"}, key: key}
	if err := rs.Add(o); err != nil {
		t.Fatal(err)
	}
	var ar bytes.Buffer
	if err := WriteTar(&ar, []Source{{Path: src, Name: "t"}}, io.Discard, rs, meta.Flags{}, nil); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&ar)
	got := map[string]string{}
	for h, err := tr.Next(); err != io.EOF; h, err = tr.Next() {
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[h.Name] = fmt.Sprintf("from %s, %d bytes, equal %v", h.PAXRecords[resumeRecord], len(data), bytes.HasSuffix(body, data))
	}
	want := map[string]string{"t/": "from , 0 bytes, equal true", "t/a": "from 1500, 1500 bytes, equal true", "t/b": "from , 3000 bytes, equal true"}
	if fmt.Sprint(got) != fmt.Sprint(want) || rs.kept != 1500 {
		t.Fatalf("entries %v, %d bytes kept; want %v, 1500", got, rs.kept, want)
	}
}
