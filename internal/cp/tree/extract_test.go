package tree

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// entry is one tar entry for a test archive.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64 // 0: 0644
}

func archive(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: cmp.Or(e.mode, 0o644), Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil && e.typ == tar.TypeReg {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestExtractHostile feeds archives that try to write outside the
// destination: every one must fail, and nothing may appear outside.
func TestExtractHostile(t *testing.T) {
	cases := []struct {
		name    string
		entries []entry
		says    string
	}{
		{"absolute path", []entry{{name: "/etc/evil", typ: tar.TypeReg, body: "x"}}, "absolute"},
		{"dot dot", []entry{{name: "a/../../evil", typ: tar.TypeReg, body: "x"}}, "'..'"},
		{"dot dot alone", []entry{{name: "..", typ: tar.TypeDir}}, "'..'"},
		{"names nothing", []entry{{name: "./", typ: tar.TypeDir}}, "names no file"},
		{"through a link out", []entry{
			{name: "out", typ: tar.TypeSymlink, link: "../outside"},
			{name: "out/evil", typ: tar.TypeReg, body: "x"},
		}, "evil"},
		{"through an absolute link", []entry{
			{name: "out", typ: tar.TypeSymlink, link: "/tmp"},
			{name: "out/evil", typ: tar.TypeReg, body: "x"},
		}, "evil"},
		{"file over a link out", []entry{
			{name: "f", typ: tar.TypeSymlink, link: "../outside/f"},
			{name: "f", typ: tar.TypeSymlink, link: "../outside/g"},
			{name: "d", typ: tar.TypeSymlink, link: "../outside"},
			{name: "d/", typ: tar.TypeDir},
		}, "make directory"},
		{"hard link", []entry{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}, "unsupported"},
		{"device", []entry{{name: "dev", typ: tar.TypeChar}}, "unsupported"},
		{"not tar", nil, "read archive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dst, outside := filepath.Join(base, "dst"), filepath.Join(base, "outside")
			for _, d := range []string{dst, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			data := []byte("this is not a tar archive, not even close to one, but long enough to be read as a header block......" + strings.Repeat("z", 512))
			if tc.entries != nil {
				data = archive(t, tc.entries...)
			}
			root := openRoot(t, dst)
			err := extract(context.Background(), root, bytes.NewReader(data), scope{names: tops(tc.entries)}, "", modes{}, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error saying %q", err, tc.says)
			}
			if left, _ := os.ReadDir(outside); len(left) > 0 {
				t.Fatalf("written outside the destination: %v", left)
			}
		})
	}
}

func TestExtractTop(t *testing.T) {
	dst := t.TempDir()
	root := openRoot(t, dst)
	data := archive(t,
		entry{name: "src/", typ: tar.TypeDir},
		entry{name: "src/f", typ: tar.TypeReg, body: "hello"},
		entry{name: "src/l", typ: tar.TypeSymlink, link: "f"},
	)
	if err := extract(context.Background(), root, bytes.NewReader(data), scope{names: []string{"src"}}, "renamed", modes{}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "renamed", "l")); err != nil || string(b) != "hello" {
		t.Fatalf("renamed/l: %q, %v", b, err)
	}
}

// tops returns the first elements of the names of entries: the top-level
// names an archive of them was asked for.
func tops(entries []entry) []string {
	var names []string
	for _, e := range entries {
		first, _, _ := strings.Cut(strings.TrimPrefix(e.name, "/"), "/")
		names = append(names, first)
	}
	return names
}

// TestExtractUnasked: an entry outside the top-level names asked for
// fails the extraction before anything of it is written, with the entry's
// name quoted, whatever the entries before it (links and directories of
// names asked for included).
func TestExtractUnasked(t *testing.T) {
	cases := []struct {
		name    string
		entries []entry
		top     string
	}{
		{"hidden file", []entry{{name: ".bashrc", typ: tar.TypeReg, body: "evil"}}, ""},
		{"after the names asked for", []entry{{name: "dir/", typ: tar.TypeDir}, {name: "dir/f", typ: tar.TypeReg, body: "ok"}, {name: ".ssh/authorized_keys", typ: tar.TypeReg, body: "evil"}}, ""},
		{"a directory", []entry{{name: ".ssh/", typ: tar.TypeDir}}, ""},
		{"a link", []entry{{name: ".ssh", typ: tar.TypeSymlink, link: "dir"}}, ""},
		{"a prefix of a name", []entry{{name: "di/f", typ: tar.TypeReg, body: "evil"}}, ""},
		{"with ./", []entry{{name: "./.ssh/authorized_keys", typ: tar.TypeReg, body: "evil"}}, ""},
		{"to a new name", []entry{{name: "dir/", typ: tar.TypeDir}, {name: ".ssh/authorized_keys", typ: tar.TypeReg, body: "evil"}}, "copy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			root := openRoot(t, dst)
			err := extract(context.Background(), root, bytes.NewReader(archive(t, tc.entries...)), scope{names: []string{"dir"}}, tc.top, modes{}, nil, nil)
			var u *proto.Unasked
			last := tc.entries[len(tc.entries)-1].name
			if !errors.As(err, &u) || u.Claim != last {
				t.Fatalf("got %v, want the refusal of %q", err, last)
			}
			for _, p := range []string{".ssh", ".bashrc", "di", "copy/authorized_keys", "dir/authorized_keys"} {
				if _, err := os.Lstat(filepath.Join(dst, p)); err == nil {
					t.Errorf("%s written", p)
				}
			}
		})
	}
}

// TestExtractThroughLinkInside: an entry whose way leads through a link in
// the destination, even to inside it, is refused, and what the link leads
// to stays as it was; a real directory in the way is merged into.
func TestExtractThroughLinkInside(t *testing.T) {
	cases := []struct {
		name    string
		link    string // made at dst/link, pointing to .ssh (relative)
		entries []entry
		fail    string // in the error; "" for success
	}{
		{"the top", "dir", []entry{{name: "dir/authorized_keys", typ: tar.TypeReg, body: "evil"}}, `"dir" is not a directory here`},
		{"below a real directory", "dir/sub", []entry{{name: "dir/", typ: tar.TypeDir}, {name: "dir/sub/authorized_keys", typ: tar.TypeReg, body: "evil"}}, `"dir/sub" is not a directory here`},
		{"a directory below it", "dir", []entry{{name: "dir/x/", typ: tar.TypeDir}}, `"dir" is not a directory here`},
		{"a real directory", "", []entry{{name: "dir/sub/f", typ: tar.TypeReg, body: "ok"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			os.MkdirAll(filepath.Join(dst, ".ssh"), 0o700)
			os.MkdirAll(filepath.Join(dst, "dir", "sub"), 0o755)
			os.WriteFile(filepath.Join(dst, ".ssh", "authorized_keys"), []byte("mine"), 0o600)
			if tc.link != "" {
				os.RemoveAll(filepath.Join(dst, tc.link))
				to, _ := filepath.Rel(filepath.Dir(filepath.Join(dst, tc.link)), filepath.Join(dst, ".ssh"))
				if err := os.Symlink(to, filepath.Join(dst, tc.link)); err != nil {
					t.Fatal(err)
				}
			}
			root := openRoot(t, dst)
			err := extract(context.Background(), root, bytes.NewReader(archive(t, tc.entries...)), scope{names: []string{"dir"}}, "", modes{}, nil, nil)
			if tc.fail == "" && err != nil || tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)) {
				t.Fatalf("got %v, want %q", err, tc.fail)
			}
			if left, _ := os.ReadDir(filepath.Join(dst, ".ssh")); len(left) != 1 {
				t.Errorf(".ssh holds %d files, want its one", len(left))
			}
			if b, _ := os.ReadFile(filepath.Join(dst, ".ssh", "authorized_keys")); string(b) != "mine" {
				t.Errorf("authorized_keys holds %q", b)
			}
		})
	}
}

// TestExtractQuotesNames: an extraction error names the remote's entry
// quoted, so that a name cannot act on the terminal (scp's CVE-2019-6109
// class).
func TestExtractQuotesNames(t *testing.T) {
	evil := "dir/\x1b[2J\rdone"
	cases := []struct {
		name    string
		entries []entry
	}{
		{"a directory in the way of a file", []entry{{name: "dir/", typ: tar.TypeDir}, {name: evil + "/", typ: tar.TypeDir}, {name: evil, typ: tar.TypeReg, body: "x"}}},
		{"a file in the way of a directory", []entry{{name: "dir/", typ: tar.TypeDir}, {name: evil, typ: tar.TypeReg, body: "x"}, {name: evil + "/sub", typ: tar.TypeReg, body: "x"}}},
		{"an entry in a directory never made", []entry{{name: "dir/", typ: tar.TypeDir}, {name: evil + "/sub", typ: tar.TypeReg, body: "x"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := openRoot(t, t.TempDir())
			err := extract(context.Background(), root, bytes.NewReader(archive(t, tc.entries...)), scope{names: []string{"dir"}}, "", modes{}, nil, nil)
			if err == nil || strings.ContainsAny(err.Error(), "\x1b\r") || !strings.Contains(err.Error(), `\x1b[2J\rdone`) {
				t.Fatalf("got %q, want an error naming the entry quoted", err)
			}
		})
	}
}

// TestExtractKeepsExistingDirs: a directory the archive names that exists
// already keeps its mode, unless -p asks for the archive's (the
// CVE-2018-20685 class: an archive cannot open up the user's directory);
// one it makes gets the archive's mode.
func TestExtractKeepsExistingDirs(t *testing.T) {
	for _, preserve := range []bool{false, true} {
		t.Run(fmt.Sprintf("preserve=%v", preserve), func(t *testing.T) {
			dst := t.TempDir()
			existing := filepath.Join(dst, "dir")
			if err := os.Mkdir(existing, 0o700); err != nil {
				t.Fatal(err)
			}
			root := openRoot(t, dst)
			entries := []entry{{name: "dir/", typ: tar.TypeDir, mode: 0o777}, {name: "dir/new/", typ: tar.TypeDir, mode: 0o750}}
			if err := extract(context.Background(), root, bytes.NewReader(archive(t, entries...)), scope{names: []string{"dir"}}, "", modes{preserve: preserve}, nil, nil); err != nil {
				t.Fatal(err)
			}
			want := fs.FileMode(0o700)
			if preserve {
				want = 0o777
			}
			for dir, want := range map[string]fs.FileMode{existing: want, filepath.Join(existing, "new"): 0o750} {
				fi, err := os.Stat(dir)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != want {
					t.Errorf("%s: mode %v, want %v", dir, fi.Mode().Perm(), want)
				}
			}
		})
	}
}

// TestExtractManyDirs: files spread over more directories than an
// extraction keeps open, revisited after they were closed, come out
// exact; a file written twice keeps the second, shorter body; in an
// existing directory the stale partial copies of a file written are
// removed and those of other files stay.
func TestExtractManyDirs(t *testing.T) {
	dst := t.TempDir()
	old := filepath.Join(dst, "top", "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := partialName(filepath.Join(old, "f"), proto.Contents{Size: 99, Changed: 1})
	other := partialName(filepath.Join(old, "g"), proto.Contents{Size: 99, Changed: 1})
	for _, p := range []string{stale, other, filepath.Join(old, "f")} {
		if err := os.WriteFile(p, []byte(strings.Repeat("old ", 100)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	entries := []entry{{name: "top/", typ: tar.TypeDir}}
	want := map[string]string{"top/old/f": "new f"}
	for d := range 2 * maxOpenDirs {
		entries = append(entries, entry{name: fmt.Sprintf("top/d%d/", d), typ: tar.TypeDir})
	}
	for round := range 2 {
		for d := range 2 * maxOpenDirs {
			name := fmt.Sprintf("top/d%d/f%d", d, round)
			want[name] = strings.Repeat(name, d+1)
			entries = append(entries, entry{name: name, typ: tar.TypeReg, body: want[name]})
		}
	}
	entries = append(entries, entry{name: "top/d0/f0", typ: tar.TypeReg, body: "short"}, entry{name: "top/old/f", typ: tar.TypeReg, body: "new f"})
	want["top/d0/f0"] = "short"
	root := openRoot(t, dst)
	if err := extract(context.Background(), root, bytes.NewReader(archive(t, entries...)), scope{names: []string{"top"}}, "", modes{}, nil, nil); err != nil {
		t.Fatal(err)
	}
	for name, body := range want {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != body {
			t.Fatalf("%s: %q, %v; want %q", name, b, err, body)
		}
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale partial copy of old/f: %v, want it removed", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("partial copy of old/g: %v, want it kept", err)
	}
	left, _ := filepath.Glob(filepath.Join(dst, "top", "d*", ".*"))
	if len(left) > 0 {
		t.Errorf("partial files left: %v", left)
	}
}

// TestExtractWriters: small files in a directory the extraction made,
// written on writers' goroutines, come out as the archive's order says (a
// later entry of the same name wins, a directory in place of a file fails),
// with their modes and times; a file that cannot be written, or whose data
// is cut short, fails the extraction and leaves nothing under its name.
func TestExtractWriters(t *testing.T) {
	long := "top/" + strings.Repeat("n", 256)
	cases := []struct {
		name    string
		entries []entry
		cut     int // bytes cut off the archive's end
		says    string
		want    map[string]string // file -> body ("->" + target: a link)
	}{
		{"same name twice", twice(tar.TypeReg), 0, "", sameTwice(tar.TypeReg)},
		{"file then link", twice(tar.TypeSymlink), 0, "", sameTwice(tar.TypeSymlink)},
		{"file then directory", []entry{{name: "top/c", typ: tar.TypeReg, body: "c"}, {name: "top/c/", typ: tar.TypeDir}}, 0, `make directory "top/c"`,
			map[string]string{"top/c": "c"}},
		{"name too long", []entry{{name: "top/ok", typ: tar.TypeReg, body: "ok"}, {name: long, typ: tar.TypeReg, body: "x"}}, 0, "file name too long",
			map[string]string{"top/ok": "ok"}},
		{"cut short", []entry{{name: "top/d", typ: tar.TypeReg, body: "d"}, {name: "top/e", typ: tar.TypeReg, body: strings.Repeat("e", 4096)}}, 1024 + 2048, "read archive",
			map[string]string{"top/d": "d"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			root := openRoot(t, dst)
			entries := append([]entry{{name: "top/", typ: tar.TypeDir, mode: 0o755}}, tc.entries...)
			data := archive(t, entries...)
			err := extract(context.Background(), root, bytes.NewReader(data[:len(data)-tc.cut]), scope{names: []string{"top"}}, "", modes{preserve: true}, nil, nil)
			if tc.says == "" && err != nil || tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)) {
				t.Fatalf("extract: %v, want an error with %q", err, tc.says)
			}
			for name, body := range tc.want {
				if target, ok := strings.CutPrefix(body, "->"); ok {
					if got, err := os.Readlink(filepath.Join(dst, name)); err != nil || got != target {
						t.Errorf("%s: link to %q, %v; want %q", name, got, err, target)
					}
					continue
				}
				fi, err := os.Lstat(filepath.Join(dst, name))
				b, _ := os.ReadFile(filepath.Join(dst, name))
				if err != nil || string(b) != body || fi.Mode() != 0o644 || !fi.ModTime().Equal(time.Unix(0, 0)) {
					t.Errorf("%s: %q, mode %v, time %v, %v; want %q, 0644, the epoch", name, b, fi.Mode(), fi.ModTime(), err, body)
				}
			}
			names, _ := os.ReadDir(filepath.Join(dst, "top"))
			if len(names) != len(tc.want) {
				t.Errorf("top holds %v, want only %v", names, tc.want)
			}
		})
	}
}

// twice returns entries of 100 files, each followed by an entry of the
// same name of type typ: a file of the same size, or a link.
func twice(typ byte) []entry {
	var es []entry
	for i := range 100 {
		name := fmt.Sprintf("top/f%03d", i)
		es = append(es, entry{name: name, typ: tar.TypeReg, body: "first"}, entry{name: name, typ: typ, body: "other", link: "other"})
	}
	return es
}

// sameTwice returns what twice(typ) extracts to, in TestExtractWriters' terms.
func sameTwice(typ byte) map[string]string {
	want := map[string]string{}
	for i := range 100 {
		want[fmt.Sprintf("top/f%03d", i)] = map[byte]string{tar.TypeReg: "other", tar.TypeSymlink: "->other"}[typ]
	}
	return want
}

// openRoot opens dir as a root for t, closed at the end of t.
func openRoot(t testing.TB, dir string) *os.Root {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

// TestCutTo checks that cutTo cuts a longer file and leaves one that is
// no longer untouched: its change time stays (ftruncate would set it, and
// on ext4 make the close of an empty file write it out at once).
func TestCutTo(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctime := func() unix.Timespec {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ctim
	}
	// The change time is the file's creation; wait until the clock's
	// coarse tick has moved past it.
	before := ctime()
	testutil.WaitFor(t, time.Second, "the clock to move past the change time", func() bool {
		var now unix.Timespec
		unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &now)
		return now.Nano() > before.Nano()
	})
	if err := cutTo(f, 0); err != nil {
		t.Fatal(err)
	}
	if got := ctime(); got != before {
		t.Errorf("cutTo on an empty file changed its change time: %v, was %v", got, before)
	}
	if _, err := f.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if err := cutTo(f, 4); err != nil {
		t.Fatal(err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 4 {
		t.Errorf("after cutTo(f, 4): %v, %v; want 4 bytes", fi.Size(), err)
	}
}

// TestExtractWithoutR: an archive asked for without -r writes only regular
// files at its top level; a directory entry, an entry below a top-level
// name (even into a directory that exists here) or a link is refused,
// quoted, before anything of it is written.
func TestExtractWithoutR(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		entries []entry
		claim   string // "": taken
	}{
		{"a file", []entry{{name: "a", typ: tar.TypeReg, body: "a"}}, ""},
		{"into an existing directory", []entry{{name: "bin/planted", typ: tar.TypeReg, body: "evil"}}, "bin/planted"},
		{"with ./", []entry{{name: "./bin/planted", typ: tar.TypeReg, body: "evil"}}, "./bin/planted"},
		{"a directory", []entry{{name: "bin/", typ: tar.TypeDir, mode: 0o777}, {name: "bin/planted", typ: tar.TypeReg, body: "evil"}}, "bin/"},
		{"after a file", []entry{{name: "a", typ: tar.TypeReg, body: "a"}, {name: "bin/new/planted", typ: tar.TypeReg, body: "evil"}}, "bin/new/planted"},
		{"a link", []entry{{name: "bin", typ: tar.TypeSymlink, link: "/etc"}}, "bin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := t.TempDir()
			if err := os.Mkdir(filepath.Join(dst, "bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			root := openRoot(t, dst)
			err := extract(context.Background(), root, bytes.NewReader(archive(t, tc.entries...)), scope{names: []string{"a", "bin"}, files: true}, "", modes{}, nil, nil)
			var u *proto.Unasked
			switch {
			case tc.claim == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.claim != "" && (!errors.As(err, &u) || u.Claim != tc.claim):
				t.Fatalf("got %v, want the refusal of %q", err, tc.claim)
			case tc.claim == "":
				if b, err := os.ReadFile(filepath.Join(dst, "a")); err != nil || string(b) != "a" {
					t.Fatalf("a: %q, %v", b, err)
				}
			}
			if left, _ := os.ReadDir(filepath.Join(dst, "bin")); tc.claim != "" && len(left) != 0 {
				t.Errorf("bin holds %v", left)
			}
			if fi, err := os.Lstat(filepath.Join(dst, "bin")); err != nil || tc.claim != "" && fi.Mode() != fs.ModeDir|0o755 {
				t.Errorf("bin: %v, %v; want the directory as it was", fi.Mode(), err)
			}
		})
	}
}

// TestExtractHonestWithoutR: what our sending side sends for files asked
// for without -r (a pattern's: several, one with holes, one a link to a
// file) is taken whole by an extraction that takes only files.
func TestExtractHonestWithoutR(t *testing.T) {
	t.Parallel()
	src, dst := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "plain"), []byte("plain"), 0o644); err != nil {
		t.Fatal(err)
	}
	sparseFile(t, filepath.Join(src, "holes"), 1<<20, []fragment{{off: 4096, data: []byte("data")}})
	if err := os.Symlink("plain", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	names := []string{"plain", "holes", "link"}
	var srcs []Source
	for _, n := range names {
		srcs = append(srcs, Source{Path: filepath.Join(src, n), Name: n})
	}
	var b bytes.Buffer
	if err := WriteTar(&b, srcs, io.Discard, nil, meta.Flags{}, nil); err != nil {
		t.Fatal(err)
	}
	root := openRoot(t, dst)
	if err := extract(context.Background(), root, &b, scope{names: names, files: true}, "", modes{}, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"plain", "holes", "link"} {
		want, _ := os.ReadFile(filepath.Join(src, n))
		if got, err := os.ReadFile(filepath.Join(dst, n)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want %d", n, len(got), err, len(want))
		}
	}
}

// TestDirMetas: a directory named many times keeps one record, its first
// entry's; records stay in the order their directories first came.
func TestDirMetas(t *testing.T) {
	t.Parallel()
	var m dirMetas
	for i := range 20000 {
		m.add(dirMeta{name: "d", mode: fs.FileMode(i % 0o777)})
		m.add(dirMeta{name: filepath.Join("d", "e"), mode: 0o700})
	}
	m.add(dirMeta{name: "f", mode: 0o755})
	want := []dirMeta{{name: "d"}, {name: filepath.Join("d", "e"), mode: 0o700}, {name: "f", mode: 0o755}}
	if !slices.Equal(m.list, want) || len(m.has) != len(want) {
		t.Fatalf("records %v (%d names), want %v", m.list, len(m.has), want)
	}
}

// TestExtractRepeatedDir: with -p, an archive that names one existing
// directory many times extracts, and the directory gets its first
// entry's mode.
func TestExtractRepeatedDir(t *testing.T) {
	t.Parallel()
	dst := t.TempDir()
	if err := os.Mkdir(filepath.Join(dst, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	entries := []entry{{name: "d/", typ: tar.TypeDir, mode: 0o750}}
	for range 2000 {
		entries = append(entries, entry{name: "d/", typ: tar.TypeDir, mode: 0o777})
	}
	root := openRoot(t, dst)
	if err := extract(context.Background(), root, bytes.NewReader(archive(t, entries...)), scope{names: []string{"d"}}, "", modes{preserve: true}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "d")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("d: %v, %v; want 0750", fi.Mode(), err)
	}
}
