package cp

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
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unnamed returns writeUnnamed as a way of TestWriteSmallWays, linking
// through /proc/self/fd from the start if byPath (else by the descriptor
// where the test may: as root).
func unnamed(t *testing.T, byPath bool) func(int, writeJob) error {
	return func(dirfd int, j writeJob) error {
		var b atomic.Bool
		b.Store(byPath)
		ok, err := writeUnnamed(dirfd, j, umask(), nil, &b)
		if !ok && err == nil {
			t.Skipf("O_TMPFILE and linkat through /proc not available in %s", t.TempDir())
		}
		return err
	}
}

// TestWriteSmallWays: a small file written unnamed until complete, or
// under its partial name where that cannot be, comes out with its bytes,
// mode (setuid too) and times; unnamed, it replaces a file of an earlier
// entry of the same name and fails on a directory, which stays; neither
// way leaves a temporary file.
func TestWriteSmallWays(t *testing.T) {
	ways := []struct {
		name  string
		write func(dirfd int, j writeJob) error
	}{
		{"unnamed", unnamed(t, false)},
		{"unnamed, linked through /proc", unnamed(t, true)},
		{"partial", func(dirfd int, j writeJob) error { return writeSmall(dirfd, j, nil) }},
	}
	// 0644 is made so where the umask allows, the others chmod-ed to.
	for _, mode := range []fs.FileMode{0o755 | fs.ModeSetuid, 0o644, 0o777} {
		for _, way := range ways {
			for _, before := range []string{"nothing", "file", "directory"} {
				t.Run(fmt.Sprint(mode, "/", way.name, "/", before), func(t *testing.T) {
					writeSmallWay(t, way.write, before, mode)
				})
			}
		}
	}
}

// writeSmallWay writes a file of mode with write over what is there
// before (see TestWriteSmallWays) and checks it.
func writeSmallWay(t *testing.T, write func(int, writeJob) error, before string, mode fs.FileMode) {
	mtime, atime := time.Unix(1e9, 123456789), time.Unix(1.5e9, 987654321)
	tmp := t.TempDir()
	p := filepath.Join(tmp, "f")
	switch before {
	case "file":
		os.WriteFile(p, []byte("older and longer"), 0o600)
	case "directory":
		os.Mkdir(p, 0o700)
	}
	fd, err := unix.Open(tmp, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	j := writeJob{s: spot{base: "f", name: "top/f", in: &dir{plain: noDefaultACL(fd)}}, data: []byte("new body"), meta: fileMeta{mode: mode, atime: atime, mtime: mtime}}
	err = write(fd, j)
	if before == "directory" {
		if fi, serr := os.Lstat(p); err == nil || serr != nil || !fi.IsDir() {
			t.Fatalf("over a directory: %v, and it is %v, %v; want an error and the directory kept", err, fi, serr)
		}
		noTemps(t, tmp)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil || !time.Unix(st.Atim.Unix()).Equal(atime) {
		t.Errorf("atime %v, %v; want %v", time.Unix(st.Atim.Unix()), err, atime)
	}
	checkFile(t, p, "new body", mode, mtime)
	noTemps(t, tmp)
}

// checkFile fails t unless p is a regular file with body, mode and mtime.
func checkFile(t *testing.T, p, body string, mode fs.FileMode, mtime time.Time) {
	t.Helper()
	fi, err := os.Lstat(p)
	b, _ := os.ReadFile(p)
	if err != nil || string(b) != body || fi.Mode() != mode || !fi.ModTime().Equal(mtime) {
		t.Errorf("%s: %q, mode %v, time %v, %v; want %q, %v, %v", p, b, fi.Mode(), fi.ModTime(), err, body, mode, mtime)
	}
}

// TestExtractDirsAhead: directories made while the files of those before
// them are still being written, more of them than an extraction keeps
// open, come out exact, in their modes; an archive cut anywhere in the
// tree fails and leaves each of its small files whole or absent, and no
// temporary file.
func TestExtractDirsAhead(t *testing.T) {
	entries := []entry{{name: "top/", typ: tar.TypeDir, mode: 0o755}}
	want := map[string]string{}
	for d := range 2*maxOpenDirs + 3 {
		entries = append(entries, entry{name: fmt.Sprintf("top/d%d/", d), typ: tar.TypeDir, mode: 0o750})
		for f := range 10 {
			name := fmt.Sprintf("top/d%d/f%d", d, f)
			want[name] = strings.Repeat(name, 1+(d*10+f)%300)
			entries = append(entries, entry{name: name, typ: tar.TypeReg, body: want[name]})
		}
	}
	data := archive(t, entries...)
	for _, end := range []int{len(data), len(data) / 5, len(data) / 2, len(data) * 2 / 3} {
		// archive/tar takes an archive cut in an entry's padding for a
		// whole one (the stream's end is what catches that): cut in text.
		for end < len(data) && (data[end-1] == 0 || data[end] == 0) {
			end--
		}
		cut := len(data) - end
		t.Run(fmt.Sprint("cut ", cut), func(t *testing.T) {
			dst := t.TempDir()
			root := openRoot(t, dst)
			err := extract(context.Background(), root, bytes.NewReader(data[:end]), scope{names: []string{"top"}}, "", modes{preserve: true}, nil, nil)
			if (err != nil) != (cut != 0) {
				t.Fatalf("extract of the archive cut by %d bytes: %v", cut, err)
			}
			found := 0
			for name, body := range want {
				p := filepath.Join(dst, name)
				if _, err := os.Lstat(p); cut != 0 && errors.Is(err, fs.ErrNotExist) {
					continue
				}
				found++
				checkFile(t, p, body, 0o644, time.Unix(0, 0))
			}
			if cut == 0 && found != len(want) || cut != 0 && (found == 0 || found == len(want)) {
				t.Errorf("%d of %d files there, cut by %d bytes", found, len(want), cut)
			}
			dirs, _ := filepath.Glob(filepath.Join(dst, "top", "d*"))
			for _, d := range dirs {
				noTemps(t, d)
				if fi, err := os.Stat(d); cut == 0 && (err != nil || fi.Mode() != fs.ModeDir|0o750) {
					t.Errorf("%s: %v, %v; want a directory, 0750", d, fi.Mode(), err)
				}
			}
		})
	}
}

// TestExtractDefaultACL: files extracted into directories the extraction
// made under a directory with a default ACL, which stands for the umask
// there, come out in their modes all the same.
func TestExtractDefaultACL(t *testing.T) {
	dst := t.TempDir()
	// The default ACL u::rwx g::rwx o::--- (version 2, then tag, permissions
	// and id of each entry, little-endian).
	acl := []byte{2, 0, 0, 0, 1, 0, 7, 0, 255, 255, 255, 255, 4, 0, 7, 0, 255, 255, 255, 255, 32, 0, 0, 0, 255, 255, 255, 255}
	if err := unix.Setxattr(dst, "system.posix_acl_default", acl, 0); err != nil {
		t.Skipf("no default ACL on %s: %v", dst, err)
	}
	data := archive(t, entry{name: "top/", typ: tar.TypeDir, mode: 0o755}, entry{name: "top/d/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "top/d/f", typ: tar.TypeReg, body: "body", mode: 0o644})
	root := openRoot(t, dst)
	if err := extract(context.Background(), root, bytes.NewReader(data), scope{names: []string{"top"}}, "", modes{preserve: true}, nil, nil); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(dst, "top/d/f"), "body", 0o644, time.Unix(0, 0))
}

// TestMadeMode: a file is made with its mode only where the umask, a
// default ACL or the kernel's handling of setuid, setgid and sticky
// cannot change it.
func TestMadeMode(t *testing.T) {
	for _, c := range []struct {
		m, umask fs.FileMode
		plain    bool
		made     uint32
		exact    bool
	}{
		{0o644, 0o022, true, 0o644, true},
		{0o600, 0o077, true, 0o600, true},
		{0, 0o022, true, 0, true},
		{0o664, 0o022, true, 0o600, false},
		{0o644, 0o022, false, 0o600, false},
		{0o755 | fs.ModeSetuid, 0, true, 0o600, false},
		{0o755 | fs.ModeSetgid, 0, true, 0o600, false},
		{0o755 | fs.ModeSticky, 0, true, 0o600, false},
	} {
		made, exact := madeMode(c.m, c.umask, c.plain)
		if made != c.made || exact != c.exact {
			t.Errorf("madeMode(%v, %o, %v) = %o, %v; want %o, %v", c.m, c.umask, c.plain, made, exact, c.made, c.exact)
		}
	}
}
