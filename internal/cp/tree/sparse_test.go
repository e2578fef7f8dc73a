package tree

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// sparseFile makes the file name of size bytes with data only in frags
// (written, so allocated), holes elsewhere.
func sparseFile(t *testing.T, name string, size int64, frags []fragment) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, fr := range frags {
		if _, err := f.WriteAt(fr.data, fr.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// openSparse makes a file as sparseFile does and returns it open for
// reading and writing, closed at the end of the test, with its data
// segments.
func openSparse(t *testing.T, size int64, frags []fragment) (*os.File, []segment) {
	t.Helper()
	name := filepath.Join(t.TempDir(), "f")
	sparseFile(t, name, size, frags)
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	segs, err := dataSegments(f, size)
	if err != nil {
		t.Fatal(err)
	}
	return f, segs
}

// data is n bytes of b.
func data(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// sparseCases are files with holes at the start, at the end, between
// data, none, and nothing but a hole; want is their data segments (on
// 4 KiB blocks, as ext4 and tmpfs find them).
var sparseCases = []struct {
	name  string
	size  int64
	frags []fragment
	want  []segment
}{
	{"empty", 0, nil, nil},
	{"no hole", 10000, []fragment{{0, data(1, 10000)}}, []segment{{0, 10000}}},
	{"hole at the start", 1<<20 + 100, []fragment{{1 << 20, data(2, 100)}}, []segment{{1 << 20, 100}}},
	{"hole at the end", 1 << 20, []fragment{{0, data(3, 4096)}}, []segment{{0, 4096}}},
	{"holes between", 1 << 20, []fragment{{0, data(4, 10)}, {256 << 10, data(5, 8192)}, {1<<20 - 4096, data(6, 4096)}},
		[]segment{{0, 4096}, {256 << 10, 8192}, {1<<20 - 4096, 4096}}},
	{"all hole", 64 << 20, nil, nil},
}

func TestDataSegments(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range sparseCases {
		t.Run(tc.name, func(t *testing.T) {
			name := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			sparseFile(t, name, tc.size, tc.frags)
			f, err := os.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := dataSegments(f, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("segments %v, want %v", got, tc.want)
			}
			if off, _ := f.Seek(0, io.SeekCurrent); off != 0 {
				t.Fatalf("offset left at %d, want 0", off)
			}
			wantMode := proto.ModeFile
			if dataLen(tc.want) < tc.size {
				wantMode = proto.ModeSparse
			}
			if m := SingleMode(name); m != wantMode {
				t.Fatalf("singleMode %q, want %q", m, wantMode)
			}
		})
	}
}

func TestCoarsen(t *testing.T) {
	segs := []segment{{0, 1}, {10, 1}, {100, 1}, {105, 1}, {1000, 1}}
	cases := []struct {
		max  int
		want []segment
	}{
		{5, segs},
		{9, segs},
		{4, []segment{{0, 1}, {10, 1}, {100, 6}, {1000, 1}}},
		{3, []segment{{0, 11}, {100, 6}, {1000, 1}}},
		{2, []segment{{0, 106}, {1000, 1}}},
		{1, []segment{{0, 1001}}},
	}
	for _, tc := range cases {
		if got := coarsen(segs, tc.max); !slices.Equal(got, tc.want) {
			t.Errorf("max %d: %v, want %v", tc.max, got, tc.want)
		}
	}
	ties := []segment{{0, 1}, {2, 1}, {4, 1}, {6, 1}}
	if got := coarsen(ties, 2); len(got) != 2 || got[0].off != 0 || got[len(got)-1].end() != 7 {
		t.Errorf("equal gaps, max 2: %v", got)
	}
}

// TestSparseRoundTrip archives sparse files with WriteTar and extracts
// them: same bytes, holes still holes, and the archive holds only the
// data (and the maps).
func TestSparseRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	var stored int64
	for _, tc := range sparseCases {
		sparseFile(t, filepath.Join(src, strings.ReplaceAll(tc.name, " ", "_")), tc.size, tc.frags)
		stored += dataLen(tc.want)
	}
	sparseFile(t, filepath.Join(src, "big"), 16<<30, []fragment{{8 << 30, []byte("middle")}})
	var b bytes.Buffer
	if err := WriteTar(&b, []Source{{Path: src, Name: "tree"}}, io.Discard, nil, meta.Flags{}, nil); err != nil {
		t.Fatal(err)
	}
	if max := stored + 4096 + 64<<10; int64(b.Len()) > max {
		t.Fatalf("archive of %d bytes for %d bytes of data", b.Len(), stored)
	}
	dst := t.TempDir()
	root := openRoot(t, dst)
	if err := extract(context.Background(), root, &b, scope{names: []string{"tree"}}, "", modes{}, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range sparseCases {
		name := strings.ReplaceAll(tc.name, " ", "_")
		a, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		got := filepath.Join(dst, "tree", name)
		b, err := os.ReadFile(got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: content differs", tc.name)
		}
		if room := testutil.Allocated(t, got); room > dataLen(tc.want)+8192 {
			t.Errorf("%s: takes %d bytes for %d of data", tc.name, room, dataLen(tc.want))
		}
	}
	fi, err := os.Stat(filepath.Join(dst, "tree", "big"))
	if err != nil || fi.Size() != 16<<30 || testutil.Allocated(t, filepath.Join(dst, "tree", "big")) > 64<<10 {
		t.Fatalf("16 GiB file with 6 bytes of data: %v, %v", fi, err)
	}
}

// TestSparseHeader writes one sparse entry with values that do not fit a
// ustar header (a long name, a big uid, times before 1970 and with
// nanoseconds, a name with a newline and UTF-8) and reads it back with
// archive/tar.
func TestSparseHeader(t *testing.T) {
	f, segs := openSparse(t, 1<<20, []fragment{{8192, data(7, 100)}})
	for _, tc := range []struct {
		name         string
		uid          int
		mtime, atime time.Time
	}{
		{"short", 1000, time.Unix(1700000000, 0), time.Time{}},
		{strings.Repeat("long/", 60) + "name", 1 << 30, time.Unix(1700000000, 123456789), time.Unix(1800000000, 5)},
		{"old", 0, time.Unix(-1, 500000000), time.Unix(-100000, 0)},
		{"dir/ünï code\nwith a newline=", 1, time.Unix(0, 1), time.Time{}},
	} {
		h := &tar.Header{Name: tc.name, Mode: 0o4751, Uid: tc.uid, Gid: 7, Size: 1 << 20, ModTime: tc.mtime, AccessTime: tc.atime}
		var b bytes.Buffer
		if err := writeSparseEntry(&b, h, f, segs, make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
		if b.Len()%blockSize != 0 {
			t.Fatalf("%s: entry of %d bytes, not whole blocks", tc.name, b.Len())
		}
		tr := tar.NewReader(&b)
		got, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.Name != tc.name || got.Size != 1<<20 || got.Mode != 0o4751 || got.Uid != tc.uid || got.Gid != 7 ||
			!got.ModTime.Equal(tc.mtime) || !got.AccessTime.Equal(tc.atime) || got.Typeflag != tar.TypeReg {
			t.Fatalf("read back %+v, want %+v", got, h)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 1<<20)
		copy(want[8192:], data(7, 100))
		if !bytes.Equal(content, want) {
			t.Fatalf("%s: content differs", tc.name)
		}
	}
}

// resizer resizes the file f to size on the first write through it,
// as another process may while the file is read.
type resizer struct {
	w    io.Writer
	f    *os.File
	size int64
	done bool
}

func (r *resizer) Write(p []byte) (int, error) {
	if !r.done {
		r.done = true
		if err := r.f.Truncate(r.size); err != nil {
			return 0, err
		}
	}
	return r.w.Write(p)
}

// TestSparseChanged: a file that grows or shrinks while it is read fails
// the archive.
func TestSparseChanged(t *testing.T) {
	cases := []struct {
		name string
		size int64
	}{
		{"grows", 2 << 20},
		{"shrinks past its data", 4096},
		{"shrinks into a hole", 512 << 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, segs := openSparse(t, 1<<20, []fragment{{0, data(1, 10)}, {256 << 10, data(2, 4096)}})
			h := &tar.Header{Name: "f", Mode: 0o644, Size: 1 << 20}
			err := writeSparseEntry(&resizer{w: io.Discard, f: f, size: tc.size}, h, f, segs, make([]byte, 4096))
			if !errors.Is(err, errChanged) {
				t.Fatalf("got %v, want %v", err, errChanged)
			}
		})
	}
}

// TestExtractOne: a sparse-mode stream must be one regular entry.
func TestExtractOne(t *testing.T) {
	src := filepath.Join(t.TempDir(), "f")
	sparseFile(t, src, 4<<20, []fragment{{1 << 20, data(9, 5000)}})
	var one bytes.Buffer
	if err := WriteTar(&one, []Source{{Path: src, Name: "f"}}, io.Discard, nil, meta.Flags{}, nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		archive []byte
		says    string // the error; empty: success
	}{
		{"sparse file", one.Bytes(), ""},
		{"plain file", archive(t, entry{name: "f", typ: tar.TypeReg, body: "plain"}), ""},
		{"two files", archive(t, entry{name: "f", typ: tar.TypeReg, body: "a"}, entry{name: "g", typ: tar.TypeReg, body: "b"}), "more than one entry"},
		{"directory", archive(t, entry{name: "d/", typ: tar.TypeDir}), "want a regular file"},
		{"link", archive(t, entry{name: "l", typ: tar.TypeSymlink, link: "/etc/passwd"}), "want a regular file"},
		{"nothing", nil, "read archive"},
		{"garbage", data('x', 2048), "read archive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			f, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			err = extractOne(context.Background(), f, bytes.NewReader(tc.archive))
			if tc.says != "" {
				if err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("got %v, want an error saying %q", err, tc.says)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "sparse file" {
				a, _ := os.ReadFile(src)
				b, _ := os.ReadFile(out)
				if !bytes.Equal(a, b) || testutil.Allocated(t, out) > 16<<10 {
					t.Fatalf("content equal %v, %d bytes allocated", bytes.Equal(a, b), testutil.Allocated(t, out))
				}
			}
		})
	}
}
