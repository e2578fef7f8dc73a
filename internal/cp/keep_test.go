package cp

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// allKept is every flag that keeps something besides data, modes and
// times.
var allKept = meta.Flags{Links: true, Xattrs: true, ACLs: true, Owner: true, Group: true, Devices: true}

// keptTree makes a tree at root with what allKept keeps: hard links
// (small and large files, across directories), user, trusted and security
// xattrs, access and default ACLs, other owners, a setuid and setgid
// file of another owner, a named pipe, a device and a link owned by
// another user.
func keptTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub"), 0o750))
	a, big := filepath.Join(root, "a"), filepath.Join(root, "big")
	must(os.WriteFile(a, []byte("small"), 0o640))
	must(os.WriteFile(big, bytes.Repeat([]byte("b"), 3*aheadFile), 0o600))
	must(os.Link(a, filepath.Join(root, "b")))
	must(os.Link(a, filepath.Join(root, "sub", "c")))
	must(os.Link(big, filepath.Join(root, "sub", "big2")))
	must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o620))
	must(unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(os.Symlink("a", filepath.Join(root, "sym")))
	for _, x := range []struct{ path, name, value string }{
		{a, "user.note", "hello"}, {a, "trusted.t", "\x00bin"}, {a, "security.s", "s"},
		{a, "system.posix_acl_access", string(testACL(1234))},
		{filepath.Join(root, "sub"), "user.dir", "d"},
		{filepath.Join(root, "sub"), "system.posix_acl_default", string(testACL(4321))},
	} {
		must(unix.Lsetxattr(x.path, x.name, []byte(x.value), 0))
	}
	must(os.Lchown(a, 1234, 1235))
	suid := filepath.Join(root, "sub", "suid")
	must(os.WriteFile(suid, []byte("#!/bin/sh\n"), 0o755))
	must(os.Lchown(suid, 1234, 1235))
	must(os.Chmod(suid, 0o755|fs.ModeSetuid|fs.ModeSetgid))
	must(os.Lchown(filepath.Join(root, "sub"), 1234, 0))
	must(os.Lchown(filepath.Join(root, "sym"), 1236, 1236))
	must(os.Chtimes(a, time.Unix(1e9, 5), time.Unix(1e9, 5)))
}

// testACL is meta's test ACL: owner rw-, user uid rwx, group r--, mask
// rwx, other ---, in the kernel's binary form.
func testACL(uid uint32) []byte {
	b := []byte{2, 0, 0, 0}
	for _, e := range [][3]uint32{{1, 6, ^uint32(0)}, {2, 7, uid}, {4, 4, ^uint32(0)}, {0x10, 7, ^uint32(0)}, {0x20, 0, ^uint32(0)}} {
		b = append(b, byte(e[0]), byte(e[0]>>8), byte(e[1]), byte(e[1]>>8), byte(e[2]), byte(e[2]>>8), byte(e[2]>>16), byte(e[2]>>24))
	}
	return b
}

// TestKeepRoundTrip writes a tree as an archive with every flag, extracts
// it as root, twice, and compares every entry each time: its lstat (mode, owner, size,
// times, link count, device), its xattrs and its ACLs.
func TestKeepRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	t.Parallel()
	src, dst := filepath.Join(t.TempDir(), "t"), t.TempDir()
	keptTree(t, src)
	var ar, warn bytes.Buffer
	if err := writeTar(&ar, []source{{path: src, name: "t"}}, &warn, nil, allKept, nil); err != nil {
		t.Fatal(err)
	}
	// The first time into new directories, the small files written beside
	// the archive's reading; the second time over the first, each in turn.
	for range 2 {
		ms := modes{preserve: true, keep: meta.NewApplier(allKept, true, &warn)}
		if err := extract(context.Background(), openRoot(t, dst), bytes.NewReader(ar.Bytes()), scope{names: []string{"t"}}, "", ms, nil, nil); err != nil {
			t.Fatal(err)
		}
		if warn.Len() > 0 {
			t.Errorf("notes: %s", warn.String())
		}
		sameEntries(t, src, filepath.Join(dst, "t"))
	}
}

// sameEntries checks that every entry under want is at the same place
// under got with the same lstat (mode, owner, size, modification time but
// a link's, link count, device) and xattrs, ACLs included.
func sameEntries(t *testing.T, want, got string) {
	t.Helper()
	err := filepath.WalkDir(want, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		var w, g unix.Stat_t
		if err := unix.Lstat(p, &w); err != nil {
			return err
		}
		if err := unix.Lstat(filepath.Join(got, rel), &g); err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		link := w.Mode&unix.S_IFMT == unix.S_IFLNK
		if w.Mode != g.Mode || w.Uid != g.Uid || w.Gid != g.Gid || w.Size != g.Size || w.Nlink != g.Nlink || w.Rdev != g.Rdev || !link && w.Mtim != g.Mtim {
			t.Errorf("%s: mode %o uid %d gid %d size %d links %d dev %x mtime %v; want %o %d %d %d %d %x %v",
				rel, g.Mode, g.Uid, g.Gid, g.Size, g.Nlink, g.Rdev, g.Mtim, w.Mode, w.Uid, w.Gid, w.Size, w.Nlink, w.Rdev, w.Mtim)
		}
		if wx, gx := testutil.Xattrs(t, p), testutil.Xattrs(t, filepath.Join(got, rel)); wx != gx {
			t.Errorf("%s: xattrs %q, want %q", rel, gx, wx)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestKeepHostile feeds archives whose hard links point outside the
// destination, at a file there that this copy did not write, or at what
// is no longer a file it wrote, and whose xattrs are too many or too
// large: each must fail, with nothing written through the link and the
// entry not made.
func TestKeepHostile(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range meta.MaxXattrs + 1 {
		many[meta.XattrPrefix+"user.x"+strings.Repeat("i", i)] = "v"
	}
	dir := &tar.Header{Name: "t/", Typeflag: tar.TypeDir, Mode: 0o755}
	file := &tar.Header{Name: "t/f", Typeflag: tar.TypeReg, Mode: 0o644}
	link := func(to string) *tar.Header { return &tar.Header{Name: "t/h", Typeflag: tar.TypeLink, Linkname: to} }
	cases := []struct {
		name    string
		entries []*tar.Header
		says    string
	}{
		{"link outside", []*tar.Header{dir, link("t/../../outside/secret")}, "'..'"},
		{"link absolute", []*tar.Header{dir, link("/etc/shadow")}, "absolute"},
		{"link to a file that was there", []*tar.Header{dir, link("t/pre")}, "not a file this copy wrote"},
		{"link to a directory", []*tar.Header{dir, {Name: "t/d/", Typeflag: tar.TypeDir, Mode: 0o755}, link("t/d")}, "not a file this copy wrote"},
		{"link to a link out", []*tar.Header{dir, {Name: "t/s", Typeflag: tar.TypeSymlink, Linkname: "../outside/secret"}, link("t/s")}, "not a file this copy wrote"},
		{"link to a file replaced by a link out", []*tar.Header{dir, file, {Name: "t/f", Typeflag: tar.TypeSymlink, Linkname: "../outside/secret"}, link("t/f")}, "not a file this copy wrote"},
		{"link to itself", []*tar.Header{dir, file, {Name: "t/f", Typeflag: tar.TypeLink, Linkname: "t/f"}}, "not a file this copy wrote"},
		{"link to a later file", []*tar.Header{dir, link("t/f"), file}, "not a file this copy wrote"},
		{"too many xattrs", []*tar.Header{dir, {Name: "t/x", Typeflag: tar.TypeReg, Mode: 0o644, PAXRecords: many}}, "more than"},
		{"too large an xattr", []*tar.Header{dir, {Name: "t/x", Typeflag: tar.TypeReg, Mode: 0o644,
			PAXRecords: map[string]string{meta.XattrPrefix + "user.big": strings.Repeat("v", meta.MaxXattrValue+1)}}}, "more than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			dst, outside := filepath.Join(base, "dst"), filepath.Join(base, "outside")
			for _, f := range []string{filepath.Join(dst, "t", "pre"), filepath.Join(outside, "secret")} {
				if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f, []byte("before"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			for _, h := range tc.entries {
				if err := tw.WriteHeader(h); err != nil {
					t.Fatal(err)
				}
			}
			tw.Close()
			ms := modes{keep: meta.NewApplier(allKept, os.Geteuid() == 0, &bytes.Buffer{})}
			err := extract(context.Background(), openRoot(t, dst), &b, scope{names: []string{"t"}}, "", ms, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error saying %q", err, tc.says)
			}
			for _, f := range []string{filepath.Join(dst, "t", "pre"), filepath.Join(outside, "secret")} {
				var st unix.Stat_t
				if data, _ := os.ReadFile(f); string(data) != "before" || unix.Stat(f, &st) != nil || st.Nlink != 1 {
					t.Fatalf("%s: %q, %d links: changed or linked to", f, data, st.Nlink)
				}
			}
			for _, made := range []string{"t/h", "t/x"} {
				if _, err := os.Lstat(filepath.Join(dst, made)); err == nil {
					t.Fatalf("%s was made", made)
				}
			}
		})
	}
}

// TestKeepOwnerSetgid extracts, as root with the owners kept, files of
// root's group into a new directory under a setgid one of another group:
// though a file made there gets that group, each ends with the archive's.
func TestKeepOwnerSetgid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	t.Parallel()
	dst := t.TempDir()
	if err := os.Chown(dst, 0, 4321); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, 0o755|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	ar := archive(t, entry{name: "t/", typ: tar.TypeDir, mode: 0o755}, entry{name: "t/f", typ: tar.TypeReg, body: "x"},
		entry{name: "t/d/", typ: tar.TypeDir, mode: 0o755}, entry{name: "t/d/g", typ: tar.TypeReg, body: "y"})
	var warn bytes.Buffer
	ms := modes{preserve: true, keep: meta.NewApplier(meta.Flags{Owner: true, Group: true, NumericIDs: true}, true, &warn)}
	if err := extract(context.Background(), openRoot(t, dst), bytes.NewReader(ar), scope{names: []string{"t"}}, "", ms, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"t", "t/f", "t/d", "t/d/g"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dst, p), &st); err != nil || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s: owner %d:%d, %v; want 0:0", p, st.Uid, st.Gid, err)
		}
	}
}
