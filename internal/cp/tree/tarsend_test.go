package tree

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
)

// TestFileHead checks that archive/tar's Reader reads fileHead's header
// as it reads the one tar.Writer writes for the same file, and the data
// after it.
func TestFileHead(t *testing.T) {
	mtime := time.Unix(1700000000, 123456789)
	long := strings.Repeat("d/", 60) + "f"
	for _, tc := range []struct {
		name string
		h    tar.Header
	}{
		{"nanoseconds", tar.Header{Name: "a/b", Mode: 0o644, Uid: 1000, Gid: 100, Size: 5, ModTime: mtime, AccessTime: mtime.Add(time.Second)}},
		{"whole seconds, no atime", tar.Header{Name: "f", Mode: 0o600, Size: 0, ModTime: time.Unix(1700000000, 0)}},
		{"setuid, sticky", tar.Header{Name: "x", Mode: 0o7755, Size: 3, ModTime: mtime}},
		{"long name", tar.Header{Name: long, Mode: 0o644, Size: 4, ModTime: mtime, AccessTime: mtime}},
		{"name of 100 bytes", tar.Header{Name: strings.Repeat("n", 100), Mode: 0o644, Size: 1, ModTime: mtime}},
		{"not ASCII", tar.Header{Name: "d/\xe9t\xe9", Mode: 0o644, Size: 2, ModTime: mtime}},
		{"big ids", tar.Header{Name: "u", Mode: 0o644, Uid: 1 << 30, Gid: 1<<21 + 1, Size: 6, ModTime: mtime}},
		{"before 1970", tar.Header{Name: "old", Mode: 0o644, Size: 1, ModTime: time.Unix(-5, 250), AccessTime: time.Unix(-1, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			h.Typeflag, h.Format = tar.TypeReg, tar.FormatPAX
			data := bytes.Repeat([]byte{'z'}, int(h.Size))
			var want bytes.Buffer
			tw := tar.NewWriter(&want)
			if err := tw.WriteHeader(&h); err != nil {
				t.Fatal(err)
			}
			tw.Write(data)
			tw.Close()
			var got bytes.Buffer
			got.Write(fileHead(nil, &h))
			got.Write(data)
			got.Write(padding(h.Size))
			got.Write(make([]byte, 2*blockSize))
			wh, wd := readOne(t, &want)
			gh, gd := readOne(t, &got)
			if !reflect.DeepEqual(gh, wh) {
				t.Errorf("read back\n%+v\nwant\n%+v", gh, wh)
			}
			if !bytes.Equal(gd, data) || !bytes.Equal(wd, data) {
				t.Errorf("data %q (tar.Writer's %q), want %q", gd, wd, data)
			}
		})
	}
}

// readOne reads an archive of one entry, returning its header (the
// format left out: archive/tar's Reader guesses it) and data.
func readOne(t *testing.T, r io.Reader) (*tar.Header, []byte) {
	t.Helper()
	tr := tar.NewReader(r)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("after the entry: %v, want io.EOF", err)
	}
	h.Format = 0
	return h, data
}

// TestGNUTarReads checks that GNU tar extracts what WriteTar writes for
// small files (fileHead's blocks, with GNU's magic) as they were: names
// long and not ASCII, data, and modification times to the nanosecond.
func TestGNUTarReads(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tar"); err != nil {
		t.Fatal("no tar: make deps installs it")
	}
	src := t.TempDir()
	names := []string{"a", "d/\xe9t\xe9", strings.Repeat("long/", 30) + "f"}
	mtime := time.Unix(1700000000, 123456789)
	for _, n := range names {
		p := filepath.Join(src, "top", n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("data of "+n), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	var archive bytes.Buffer
	if err := WriteTar(&archive, []Source{{Path: filepath.Join(src, "top"), Name: "top"}}, io.Discard, nil, meta.Flags{}, nil); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	cmd := exec.Command("tar", "-x", "-C", dst)
	cmd.Stdin = &archive
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, out)
	}
	for _, n := range names {
		p := filepath.Join(dst, "top", n)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != "data of "+n {
			t.Errorf("%q: %q, %v; want its data", n, b, err)
			continue
		}
		if fi, err := os.Stat(p); err != nil || !fi.ModTime().Equal(mtime) {
			t.Errorf("%q: modified %v (%v), want %v", n, fi.ModTime(), err, mtime)
		}
	}
}
