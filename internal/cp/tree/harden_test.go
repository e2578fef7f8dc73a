package tree

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"golang.org/x/sys/unix"
)

// fragment is a data fragment of a sparse archive entry.
type fragment struct {
	off  int64
	data []byte
}

// sparseArchive returns an archive holding one PAX 1.0 sparse entry (as
// GNU tar writes them) of realsize bytes with frags as its data.
func sparseArchive(t *testing.T, name string, realsize int64, frags []fragment) []byte {
	t.Helper()
	var body bytes.Buffer
	fmt.Fprintf(&body, "%d\n", len(frags))
	for _, f := range frags {
		fmt.Fprintf(&body, "%d\n%d\n", f.off, len(f.data))
	}
	body.Write(make([]byte, (512-body.Len()%512)%512))
	for _, f := range frags {
		body.Write(f.data)
	}
	var pax bytes.Buffer
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"},
		{"GNU.sparse.name", name}, {"GNU.sparse.realsize", fmt.Sprint(realsize)}} {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec) + 1
		for len(fmt.Sprint(n))+len(rec) != n {
			n++
		}
		fmt.Fprintf(&pax, "%d%s", n, rec)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	// The extended header, written as a file and then retyped: tar.Writer
	// writes no GNU.sparse records itself.
	for _, e := range []struct {
		name string
		body []byte
	}{{"PaxHeaders/sparse", pax.Bytes()}, {"GNUSparseFile/sparse", body.Bytes()}} {
		h := &tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.body)), Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	a := b.Bytes()
	a[156] = tar.TypeXHeader
	copy(a[148:156], "        ")
	sum := 0
	for _, c := range a[:512] {
		sum += int(c)
	}
	copy(a[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return a
}

// TestExtractSparse: a sparse entry takes no more room than the data that
// arrived, its holes stay holes, and its content is right.
func TestExtractSparse(t *testing.T) {
	cases := []struct {
		name     string
		realsize int64
		frags    []fragment
	}{
		{"hole at the end", 64 << 20, []fragment{{1 << 20, []byte("hello")}, {32 << 20, bytes.Repeat([]byte{0xab}, 4096)}}},
		{"data at the end", 64 << 20, []fragment{{0, []byte("start")}, {64<<20 - 3, []byte("end")}}},
		{"all hole", 64 << 20, nil},
		{"unaligned", 10<<20 + 7, []fragment{{4095, []byte("across a block boundary")}, {5<<20 + 1, []byte("x")}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := sparseArchive(t, "s", tc.realsize, tc.frags)
			dst := t.TempDir()
			root := openRoot(t, dst)
			if err := extract(context.Background(), root, bytes.NewReader(data), scope{names: []string{"s"}}, "", modes{}, nil, nil); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dst, "s"))
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, tc.realsize)
			for _, f := range tc.frags {
				copy(want[f.off:], f.data)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("content differs (%d bytes, want %d)", len(got), len(want))
			}
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(dst, "s"), &st); err != nil {
				t.Fatal(err)
			}
			if room := st.Blocks * 512; room > int64(len(data))+int64(len(tc.frags))*8192 {
				t.Fatalf("a %d-byte archive made a file taking %d bytes", len(data), room)
			}
		})
	}
}

// TestExtractStops: skipping a huge hole reads nothing from the stream,
// so the extraction must stop when told to.
func TestExtractStops(t *testing.T) {
	data := sparseArchive(t, "s", 1<<50, []fragment{{0, []byte("x")}})
	dst := t.TempDir()
	root := openRoot(t, dst)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- extract(ctx, root, bytes.NewReader(data), scope{names: []string{"s"}}, "", modes{}, nil, nil)
	}()
	testutil.WaitFor(t, time.Minute, "the file to be started", func() bool {
		m, _ := filepath.Glob(filepath.Join(dst, ".s.rdmacp-*"))
		return len(m) > 0
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the cancellation", err)
	}
	if left, _ := os.ReadDir(dst); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestExtractModes: without -p modes lose the umask, setuid and setgid
// (and sticky on files); with -p they are applied exactly.
func TestExtractModes(t *testing.T) {
	cases := []struct {
		name     string
		typ      byte
		mode     int64
		preserve bool
		want     fs.FileMode
	}{
		{"file 6777", tar.TypeReg, 0o6777, false, 0o755},
		{"file 1777", tar.TypeReg, 0o1777, false, 0o755},
		{"file 6777 -p", tar.TypeReg, 0o6777, true, 0o777 | fs.ModeSetuid | fs.ModeSetgid},
		{"file 0640", tar.TypeReg, 0o640, false, 0o640},
		{"dir 3777", tar.TypeDir, 0o3777, false, fs.ModeDir | fs.ModeSticky | 0o755},
		{"dir 7777 -p", tar.TypeDir, 0o7777, true, fs.ModeDir | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky | 0o777},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			root := openRoot(t, dst)
			data := archive(t, entry{name: "e", typ: tc.typ, body: "x", mode: tc.mode})
			if err := extract(context.Background(), root, bytes.NewReader(data), scope{names: []string{"e"}}, "", modes{preserve: tc.preserve, umask: 0o022}, nil, nil); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(filepath.Join(dst, "e"))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != tc.want {
				t.Fatalf("mode %v, want %v", fi.Mode(), tc.want)
			}
		})
	}
}

// inTheWay makes what is in the way at p: a file, a link to outside, a
// directory, a named pipe or a device.
var inTheWay = []struct {
	name    string
	make    func(p, outside string) error
	refused string // the error, if the thing must stay
}{
	{"nothing", func(p, outside string) error { return nil }, ""},
	{"file", func(p, outside string) error { return os.WriteFile(p, []byte("old"), 0o644) }, ""},
	{"link out", func(p, outside string) error { return os.Symlink(outside, p) }, ""},
	{"directory", func(p, outside string) error { return os.Mkdir(p, 0o755) }, "is a directory"},
	{"named pipe", func(p, outside string) error { return unix.Mkfifo(p, 0o644) }, "is a named pipe"},
	{"device", func(p, outside string) error { return unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) }, "is a device"},
}

// TestExtractInTheWay: a file entry replaces a file or link in its way
// (never writing through the link) and refuses anything else, which stays.
func TestExtractInTheWay(t *testing.T) {
	checkInTheWay(t, func(dst string) error {
		root := openRoot(t, dst)
		return extract(context.Background(), root, bytes.NewReader(archive(t, entry{name: "f", typ: tar.TypeReg, body: "new"})), scope{names: []string{"f"}}, "", modes{}, nil, nil)
	})
}

// checkInTheWay puts each of inTheWay at dst/f, has put write "new" to f
// there, and checks that nothing was written through a link, that what
// put must refuse stays as it was, and that anything else is now a
// regular file holding "new", without setuid or setgid.
func checkInTheWay(t *testing.T, put func(dst string) error) {
	for _, tc := range inTheWay {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dst, outside := filepath.Join(base, "dst"), filepath.Join(base, "outside")
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(outside, []byte("outside"), 0o644); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dst, "f")
			if err := tc.make(p, outside); err != nil {
				testutil.Unmet(t, "cannot make a %s here: %v", tc.name, err)
			}
			before, _ := os.Lstat(p)
			err := put(dst)
			if b, _ := os.ReadFile(outside); string(b) != "outside" {
				t.Fatalf("written through a link: outside holds %q", b)
			}
			if tc.refused != "" {
				after, lerr := os.Lstat(p)
				if err == nil || !strings.Contains(err.Error(), tc.refused) || lerr != nil || after.Mode() != before.Mode() {
					t.Fatalf("got %v, want %q and the %s kept (now %v, %v)", err, tc.refused, tc.name, after, lerr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, lerr := os.Lstat(p)
			b, _ := os.ReadFile(p)
			if lerr != nil || !fi.Mode().IsRegular() || string(b) != "new" || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Fatalf("f: %v %v %q, want a regular file holding \"new\", without setuid", fi, lerr, b)
			}
			noTemps(t, dst)
		})
	}
}

// TestExtractCutKeepsOld: an archive that ends in the middle of a file
// leaves the file it was to replace as it was, and what arrived of the
// new one in its partial file, for a resume.
func TestExtractCutKeepsOld(t *testing.T) {
	dst := t.TempDir()
	if err := os.WriteFile(filepath.Join(dst, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := openRoot(t, dst)
	data := archive(t, entry{name: "f", typ: tar.TypeReg, body: strings.Repeat("new", 1000)})
	if err := extract(context.Background(), root, bytes.NewReader(data[:512+1000]), scope{names: []string{"f"}}, "", modes{}, nil, nil); err == nil {
		t.Fatal("a cut archive extracted without an error")
	}
	if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "old" {
		t.Fatalf("f: %q, %v; want \"old\" kept", b, err)
	}
	m, _ := filepath.Glob(filepath.Join(dst, ".f.rdmacp-*.part"))
	if len(m) != 1 {
		t.Fatalf("partial files: %v, want one", m)
	}
	if b, err := os.ReadFile(m[0]); err != nil || len(b) == 0 || !strings.HasPrefix(strings.Repeat("new", 1000), string(b)) {
		t.Fatalf("the partial file holds %d bytes, %v: want a prefix of what was sent", len(b), err)
	}
}

// TestFileSinkInTheWay: a single file replaces a file or link at its
// destination (never writing through the link) and refuses anything else,
// which stays.
func TestFileSinkInTheWay(t *testing.T) {
	checkInTheWay(t, func(dst string) error {
		s, err := newFileSink(proto.Request{Dest: dst, Contents: proto.Contents{Mode: proto.ModeFile, Name: "f", Perm: 0o6755}})
		if err == nil {
			if _, err = s.Writer().Write([]byte("new")); err == nil {
				err = s.Finish()
			}
		}
		return err
	})
}

// noTemps fails t if dir holds a temporary file of rdmacp's.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(dir, ".*.rdmacp-*")); len(m) > 0 {
		t.Errorf("temporary files left behind: %v", m)
	}
}
