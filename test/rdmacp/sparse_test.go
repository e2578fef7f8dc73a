package rdmacp

import (
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// sparseFile makes name size bytes long: holes but for 1 MiB of random
// data at each of offs.
func sparseFile(t *testing.T, name string, size int64, offs ...int64) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := make([]byte, 1<<20)
	for _, off := range offs {
		rand.NewChaCha8([32]byte{byte(off >> 20)}).Read(data)
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// TestCopySparse copies single files with holes: they arrive exact, with
// their holes, as file mode puts a file in place (DST a directory, a new
// name, or a file that is replaced; -p modes and times, or the umask and
// no times without), and only their data travels.
func TestCopySparse(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	mask := umask(t)
	cases := []struct {
		name     string
		size     int64
		offs     []int64 // where its MiBs of data are
		preserve bool
		dst      string // DST, after the destination directory
		got      string // where the copy lands in it
	}{
		{"holes-at-both-ends", 1 << 30, []int64{300 << 20}, true, "/", "holes-at-both-ends"},
		{"data-at-both-ends", 256 << 20, []int64{0, 255 << 20}, false, "/new", "new"},
		{"over-a-file", 256 << 20, []int64{10 << 20, 100 << 20}, true, "/old", "old"},
		{"all-hole", 256 << 20, nil, false, "/", "all-hole"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := filepath.Join(src, tc.name)
			tc.size, tc.offs = vmScale(tc.size, tc.offs)
			sparseFile(t, name, tc.size, tc.offs...)
			if err := os.Chmod(name, 0o750|fs.ModeSetuid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(name, mtime, mtime); err != nil {
				t.Fatal(err)
			}
			dst := t.TempDir()
			makeFile(t, filepath.Join(dst, "old"), 3<<20, false)
			args := []string{"-v", name, "target:" + dst + tc.dst}
			if tc.preserve {
				args = append([]string{"-p"}, args...)
			}
			r := s.rdmacp(t, args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			got := filepath.Join(dst, tc.got)
			sameContent(t, name, got)
			data := int64(len(tc.offs)) << 20
			if room := testutil.Allocated(t, got); room > data+1<<20 {
				t.Errorf("the copy takes %d bytes on disk for %d of data", room, data)
			}
			m := regexp.MustCompile(`(\d+) bytes in`).FindStringSubmatch(r.stderr)
			if m == nil {
				t.Fatalf("no summary line: %s", r.stderr)
			}
			if sent, _ := strconv.ParseInt(m[1], 10, 64); sent > data+64<<10 {
				t.Errorf("%d bytes travelled for %d of data", sent, data)
			}
			fi, err := os.Stat(got)
			if err != nil {
				t.Fatal(err)
			}
			want := (0o750 &^ mask).Perm()
			if tc.preserve {
				want = 0o750 | fs.ModeSetuid
			}
			if fi.Mode() != want || fi.ModTime().Equal(mtime) != tc.preserve {
				t.Errorf("mode %v, mtime %v; want %v, and the mtime copied: %v", fi.Mode(), fi.ModTime(), want, tc.preserve)
			}
			noLeftovers(t, dst, filepath.Base(got))
			noStrays(t)
		})
	}
}

// TestCopySparseTree copies a tree holding files with holes (-r): they
// arrive exact and with their holes.
func TestCopySparseTree(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	tree := filepath.Join(t.TempDir(), "tree")
	makeTree(t, tree)
	sparse := map[string][]int64{"disk.img": {0, 200 << 20}, "sub/hole": nil, "sub/deep/tail": {255 << 20}}
	for name, offs := range sparse {
		size, offs := vmScale(256<<20, offs)
		sparse[name] = offs
		sparseFile(t, filepath.Join(tree, name), size, offs...)
	}
	dir := t.TempDir()
	r := s.rdmacp(t, "-r", "-p", tree, "target:"+dir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	sameTree(t, tree, filepath.Join(dir, "tree"), func(m fs.FileMode) fs.FileMode { return m })
	for name, offs := range sparse {
		data := int64(len(offs)) << 20
		if room := testutil.Allocated(t, filepath.Join(dir, "tree", name)); room > data+1<<20 {
			t.Errorf("%s takes %d bytes on disk for %d of data", name, room, data)
		}
	}
	noStrays(t)
}

// TestCopySparseErrors: a file with holes fails as file mode does, with
// the same exit codes, and leaves nothing behind.
func TestCopySparseErrors(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	file := filepath.Join(t.TempDir(), "f")
	sparseFile(t, file, 64<<20, 1<<20)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "f"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		dst  string
		code int
		says string
	}{
		{"remote directory missing", "/nonexistent/dir/f", 3, "destination directory /nonexistent/dir does not exist"},
		{"destination is a device", "/dev/null", 3, `/dev/null\" is a device: not replaced`},
		{"a directory in the way", dir + "/", 3, "is a directory: not replaced"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.rdmacp(t, file, "target:"+tc.dst)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("exit %d, want %d with %q; stderr:\n%s", r.code, tc.code, tc.says, r.stderr)
			}
			noStrays(t)
		})
	}
}

// vmScale shrinks a sparse file's size and data offsets eightfold in the
// VM (offsets to whole MiB), where reading its holes through archive/tar
// at the receiving side is slow.
func vmScale(size int64, offs []int64) (int64, []int64) {
	if harness.host == "" {
		return size, offs
	}
	scaled := make([]int64, len(offs))
	for i, off := range offs {
		scaled[i] = off / 8 &^ (1<<20 - 1)
	}
	return size / 8, scaled
}
