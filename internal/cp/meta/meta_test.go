package meta

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// TestFlags checks that Flags travel as letters and back, and that Parse
// refuses anything else.
func TestFlags(t *testing.T) {
	t.Parallel()
	for _, f := range []Flags{{}, {Links: true}, {Xattrs: true, Owner: true, NumericIDs: true}, {true, true, true, true, true, true, true}} {
		got, err := Parse(f.String())
		if err != nil || got != f {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", f.String(), got, err, f)
		}
	}
	for _, s := range []string{"XH", "HH", "z", "H "} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) took it", s)
		}
	}
}

// acl returns a POSIX ACL in the kernel's binary form: owner rw-, the
// named user uid rwx, group r--, mask rwx, other ---.
func acl(uid uint32) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{1, 6, ^uint32(0)}, {2, 7, uid}, {4, 4, ^uint32(0)}, {0x10, 7, ^uint32(0)}, {0x20, 0, ^uint32(0)}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// setxattrs sets the xattrs of the file at path, or fails t.
func setxattrs(t *testing.T, path string, xs map[string]string) {
	t.Helper()
	for k, v := range xs {
		if err := unix.Lsetxattr(path, k, []byte(v), 0); err != nil {
			t.Fatalf("setxattr %s %s: %v", path, k, err)
		}
	}
}

// header returns the tar header of the file at path as a Reader r makes
// it.
func header(t *testing.T, r *Reader, path, name string) *tar.Header {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tar.FileInfoHeader(fi, "")
	if err != nil {
		t.Fatal(err)
	}
	h.Name, h.Uname, h.Gname = name, "", ""
	if err := r.Header(path, fi, h); err != nil {
		t.Fatal(err)
	}
	return h
}

// rootOnly skips t unless the test runs as root.
func rootOnly(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// TestReadApply reads a file's hard links, xattrs, ACL and owner into
// headers and applies them to a new file: as root everything arrives; as
// non-root only user.* xattrs and the ACL, the rest named once.
func TestReadApply(t *testing.T) {
	t.Parallel()
	rootOnly(t)
	src := t.TempDir()
	a, b := filepath.Join(src, "a"), filepath.Join(src, "b")
	if err := os.WriteFile(a, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	xs := map[string]string{"user.one": "1", "user.bin": "\x00\xff", "trusted.t": "t", "security.s": "s", aclAccess: string(acl(1234))}
	setxattrs(t, a, xs)
	if err := os.Lchown(a, 1234, 0); err != nil {
		t.Fatal(err)
	}
	var warn bytes.Buffer
	r := NewReader(Flags{Links: true, Xattrs: true, ACLs: true, Owner: true, Group: true}, true, &warn)
	h := header(t, r, a, "t/a")
	if l := header(t, r, b, "t/b"); l.Typeflag != tar.TypeLink || l.Linkname != "t/a" || l.Size != 0 {
		t.Fatalf("second name: type %q to %q size %d, want a hard link to t/a", l.Typeflag, l.Linkname, l.Size)
	}
	if h.Uid != 1234 || h.Uname != "" || h.Gname != "root" {
		t.Fatalf("owner %d %q group %q, want 1234 without a name, root", h.Uid, h.Uname, h.Gname)
	}
	for k, v := range xs {
		if h.PAXRecords[XattrPrefix+k] != v {
			t.Fatalf("record of %s: %q, want %q", k, h.PAXRecords[XattrPrefix+k], v)
		}
	}
	for _, tc := range []struct {
		root bool
		want []string // the xattrs that arrive
		says string
	}{
		{true, []string{"user.one", "user.bin", "trusted.t", "security.s", aclAccess}, ""},
		{false, []string{"user.one", "user.bin", aclAccess}, "owners and groups are not kept"},
	} {
		dst := t.TempDir()
		if err := os.WriteFile(filepath.Join(dst, "a"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		d, err := os.Open(dst)
		if err != nil {
			t.Fatal(err)
		}
		var warn bytes.Buffer
		ap := NewApplier(Flags{Xattrs: true, ACLs: true, Owner: true, Group: true}, tc.root, &warn)
		if err := ap.Check(h, "t/a"); err != nil {
			t.Fatal(err)
		}
		err = ap.Apply(int(d.Fd()), "a", "t/a", h, 0o640)
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := filepath.Join(dst, "a")
		for _, k := range tc.want {
			v, err := getxattr(got, k)
			if err != nil || string(v) != xs[k] {
				t.Errorf("root %v: %s is %q, %v; want %q", tc.root, k, v, err, xs[k])
			}
		}
		if names, _ := listxattr(got); len(names) != len(tc.want) {
			t.Errorf("root %v: xattrs %v, want %v", tc.root, names, tc.want)
		}
		var st unix.Stat_t
		if err := unix.Lstat(got, &st); err != nil {
			t.Fatal(err)
		}
		if wantUID := map[bool]uint32{true: 1234, false: 0}[tc.root]; st.Uid != wantUID {
			t.Errorf("root %v: uid %d, want %d", tc.root, st.Uid, wantUID)
		}
		if !strings.Contains(warn.String(), tc.says) || !tc.root && strings.Count(warn.String(), "\n") != 3 {
			t.Errorf("root %v: notes %q, want %q and the trusted.* and security.* ones, once each", tc.root, warn.String(), tc.says)
		}
	}
}

// TestCheck checks that an entry with too many or too large xattrs, ids
// out of range, or a hard link or device not asked for is refused.
func TestCheck(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range MaxXattrs + 1 {
		many[XattrPrefix+"user."+strings.Repeat("n", i+1)] = "v"
	}
	all := Flags{Links: true, Xattrs: true, ACLs: true, Owner: true, Group: true, Devices: true}
	cases := []struct {
		name string
		f    Flags
		h    tar.Header
		ok   bool
	}{
		{"within bounds", all, tar.Header{Typeflag: tar.TypeReg, PAXRecords: map[string]string{XattrPrefix + "user.a": strings.Repeat("v", MaxXattrValue)}}, true},
		{"too many xattrs", all, tar.Header{Typeflag: tar.TypeReg, PAXRecords: many}, false},
		{"too large a value", all, tar.Header{Typeflag: tar.TypeReg, PAXRecords: map[string]string{XattrPrefix + "user.a": strings.Repeat("v", MaxXattrValue+1)}}, false},
		{"too long a name", all, tar.Header{Typeflag: tar.TypeReg, PAXRecords: map[string]string{XattrPrefix + "user." + strings.Repeat("n", MaxXattrName): "v"}}, false},
		{"no name", all, tar.Header{Typeflag: tar.TypeReg, PAXRecords: map[string]string{XattrPrefix: "v"}}, false},
		{"ignored without -X -A", Flags{Links: true}, tar.Header{Typeflag: tar.TypeReg, PAXRecords: many}, true},
		{"negative uid", all, tar.Header{Typeflag: tar.TypeReg, Uid: -1}, false},
		{"huge gid", all, tar.Header{Typeflag: tar.TypeReg, Gid: 1 << 32}, false},
		{"huge device", all, tar.Header{Typeflag: tar.TypeChar, Devmajor: 1 << 40}, false},
		{"hard link without -H", Flags{Xattrs: true}, tar.Header{Typeflag: tar.TypeLink}, false},
		{"pipe without -D", Flags{Xattrs: true}, tar.Header{Typeflag: tar.TypeFifo}, false},
		{"pipe with -D", all, tar.Header{Typeflag: tar.TypeFifo}, true},
	}
	for _, tc := range cases {
		err := NewApplier(tc.f, true, &bytes.Buffer{}).Check(&tc.h, "e")
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestLinkTarget checks that a hard link may point only to a regular
// file this extraction wrote, and still holds.
func TestLinkTarget(t *testing.T) {
	t.Parallel()
	a := NewApplier(Flags{Links: true}, false, &bytes.Buffer{})
	a.Wrote("t/f", true)
	a.Wrote("t/l", false)
	for target, ok := range map[string]bool{"t/f": true, "t/l": false, "t/other": false, "/etc/shadow": false, "t/g": false} {
		if err := a.LinkTarget("t/g", target); (err == nil) != ok {
			t.Errorf("link to %s: %v, want ok %v", target, err, ok)
		}
	}
	a.Wrote("t/f", false)
	if err := a.LinkTarget("t/g", "t/f"); err == nil {
		t.Error("a link to a file replaced since with something else was taken")
	}
	if err := (*Applier)(nil).LinkTarget("t/g", "t/f"); err == nil {
		t.Error("a nil Applier took a link")
	}
}

// TestSpecial checks that a named pipe is made by anyone, a device only
// by root, and a device not made is named once.
func TestSpecial(t *testing.T) {
	t.Parallel()
	rootOnly(t)
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var warn bytes.Buffer
	user := NewApplier(Flags{Devices: true}, false, &warn)
	root := NewApplier(Flags{Devices: true}, true, &warn)
	null := &tar.Header{Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}
	for _, tc := range []struct {
		a    *Applier
		name string
		h    *tar.Header
		made bool
		mode uint32
	}{
		{user, "fifo", &tar.Header{Typeflag: tar.TypeFifo}, true, unix.S_IFIFO | 0o640},
		{user, "null", null, false, 0},
		{user, "null2", null, false, 0},
		{root, "null", null, true, unix.S_IFCHR | 0o640},
	} {
		made, err := tc.a.Special(int(d.Fd()), tc.name, tc.name, tc.h, 0o640)
		if err != nil || made != tc.made {
			t.Fatalf("%s: made %v, %v; want %v", tc.name, made, err, tc.made)
		}
		var st unix.Stat_t
		err = unix.Lstat(filepath.Join(dir, tc.name), &st)
		if tc.made && (err != nil || st.Mode != tc.mode || tc.h.Typeflag == tar.TypeChar && st.Rdev != unix.Mkdev(1, 3)) {
			t.Fatalf("%s: mode %o rdev %x, %v; want %o", tc.name, st.Mode, st.Rdev, err, tc.mode)
		}
	}
	if strings.Count(warn.String(), "devices are not made") != 1 {
		t.Fatalf("notes %q, want one about devices", warn.String())
	}
}

// TestOwnerByName checks that owners are mapped by name where the name
// exists here, unless --numeric-ids, and by number otherwise.
func TestOwnerByName(t *testing.T) {
	t.Parallel()
	rootOnly(t)
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		f     Flags
		uname string
		want  uint32
	}{
		{Flags{Owner: true}, "root", 0},
		{Flags{Owner: true, NumericIDs: true}, "root", 1234},
		{Flags{Owner: true}, "no-such-user-here", 1234},
		{Flags{Owner: true}, "", 1234},
	} {
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Uid: 1234, Gid: 5, Uname: tc.uname}
		if err := NewApplier(tc.f, true, &bytes.Buffer{}).Apply(int(d.Fd()), "f", "f", h, 0o755|fs.ModeSetuid); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(f, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != tc.want || st.Gid != 0 || st.Mode&0o7777 != 0o4755 {
			t.Errorf("%+v %q: uid %d gid %d mode %o, want uid %d, gid 0 as it was, mode 4755 after the chown", tc.f, tc.uname, st.Uid, st.Gid, st.Mode&0o7777, tc.want)
		}
		os.Remove(f)
	}
}

// TestDigest checks that a mark is the data's XXH3-64 in 16 lowercase hex
// digits.
func TestDigest(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("user.a\x00v\x00"), make([]byte, 100)} {
		if got, want := digest(b), fmt.Sprintf("%016x", xxh3.Hash(b)); got != want {
			t.Errorf("digest(%q) = %s, want %s", b, got, want)
		}
	}
}

// TestMarksByPath checks that a Marker lists the same marks of each entry
// with listxattrat (where the kernel has it) as by path, and that each
// change of a user xattr or ACL changes them.
func TestMarksByPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plain, tagged := filepath.Join(dir, "plain"), filepath.Join(dir, "tagged")
	for _, f := range []string{plain, tagged} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Lsetxattr(tagged, "user.k", []byte("v"), 0); err != nil {
		t.Fatalf("setxattr on the test's file system: %v", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	marks := func(m *Marker, base string) Marks {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, base), &st); err != nil {
			t.Fatal(err)
		}
		k, err := m.Marks(fd, base, filepath.Join(dir, base), &st)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	f := Flags{Xattrs: true, ACLs: true}
	at, byPath := NewMarker(f, true, false), NewMarker(f, true, false)
	byPath.byPath.Store(true)
	for _, base := range []string{"plain", "tagged"} {
		if a, p := marks(at, base), marks(byPath, base); a != p || a.Xattrs == "" || a.ACLs == "" {
			t.Errorf("%s: marks %+v, by path %+v: want the same, xattrs and ACLs listed", base, a, p)
		}
	}
	if a, b := marks(at, "plain"), marks(at, "tagged"); a.Xattrs == b.Xattrs || a.ACLs != b.ACLs {
		t.Errorf("marks without and with a user xattr: %+v, %+v: want other xattrs, the same ACLs", a, b)
	}
}
