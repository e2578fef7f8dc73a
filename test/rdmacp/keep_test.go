package rdmacp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// keepFlags are rsync's -aHAX in rdmacp's words.
var keepFlags = []string{"-r", "-p", "-H", "-X", "-A", "--owner", "-g", "-D"}

// needTools skips t (fails it under RDMAPIPE_STRICT=1) unless every one
// of tools is installed.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Unmet(t, "no %s: install it (scripts/deps.sh does)", tool)
		}
	}
}

// keptTree makes a tree at root with what keepFlags keep: hard links
// (of a small and a large file, across directories), user xattrs, access
// and default ACLs (setfacl), files, a directory and a link owned by
// other users, and a named pipe.
func keptTree(t *testing.T, root string) {
	t.Helper()
	needTools(t, "setfacl", "setfattr")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	do := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub", "deep"), 0o755))
	a, big := filepath.Join(root, "a"), filepath.Join(root, "big")
	writeFile(t, a, "alpha")
	writeFile(t, big, strings.Repeat("big file ", 30000))
	must(os.Link(a, filepath.Join(root, "b")))
	must(os.Link(a, filepath.Join(root, "sub", "deep", "c")))
	must(os.Link(big, filepath.Join(root, "sub", "big2")))
	writeFile(t, filepath.Join(root, "sub", "plain"), "plain")
	must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o640))
	must(os.Symlink("a", filepath.Join(root, "sym")))
	do("setfattr", "-n", "user.note", "-v", "kept", a)
	do("setfattr", "-n", "user.dir", "-v", "0x00ff", filepath.Join(root, "sub"))
	do("setfacl", "-m", "u:1234:rwx,g:4321:r", a)
	do("setfacl", "-d", "-m", "u:1234:rx", filepath.Join(root, "sub"))
	must(os.Lchown(a, 1234, 1234))
	must(os.Lchown(filepath.Join(root, "sub"), 1234, 4321))
	must(os.Lchown(filepath.Join(root, "fifo"), 1234, 0))
	must(os.Lchown(filepath.Join(root, "sym"), 1236, 1236))
	old := time.Date(2004, 5, 6, 7, 8, 9, 123456789, time.UTC)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, old, old.Add(time.Duration(len(p))*time.Second))
	})
	must(err)
}

// entries describes every entry under root, by its path there: its
// lstat (type and mode, owner, group, size but a directory's, link count,
// modification time but a symbolic link's, which rdmacp does not set) and
// its xattrs, ACLs included.
func entries(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode %o uid %d gid %d nlink %d", st.Mode, st.Uid, st.Gid, st.Nlink)
		if !d.IsDir() {
			desc += fmt.Sprintf(" size %d", st.Size)
		}
		if d.Type()&fs.ModeSymlink == 0 {
			desc += fmt.Sprintf(" mtime %d.%09d", st.Mtim.Sec, st.Mtim.Nsec)
		}
		rel, _ := filepath.Rel(root, p)
		m[rel] = desc + testutil.Xattrs(t, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sameEntries fails t unless the trees at want and got have the same
// entries, each described alike (see entries).
func sameEntries(t *testing.T, want, got string) {
	t.Helper()
	sameDescs(t, want, entries(t, want), entries(t, got))
}

// sameDescs fails t unless w and g, the entries of the tree at want and of
// another, are alike.
func sameDescs(t *testing.T, want string, w, g map[string]string) {
	t.Helper()
	for name, desc := range w {
		if g[name] != desc {
			t.Errorf("%s:\n got %q\nwant %q", name, g[name], desc)
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			t.Errorf("%s: not in %s", name, want)
		}
	}
}

// TestKeepUploadDownload copies a tree with hard links, xattrs, ACLs,
// other owners and a named pipe to the remote host and back with
// rsync's -aHAX in rdmacp's words: every entry arrives as it was.
func TestKeepUploadDownload(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := filepath.Join(t.TempDir(), "tree")
	keptTree(t, src)
	for _, tc := range []struct {
		name string
		args func(dst string) []string
	}{
		{"upload", func(dst string) []string { return []string{src, "target:" + dst} }},
		{"download", func(dst string) []string { return []string{"target:" + src, dst} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := t.TempDir()
			r := s.rdmacp(t, append(keepFlags, tc.args(dst)...)...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, want 0 and nothing on stderr: %s", r.code, r.stderr)
			}
			sameEntries(t, src, filepath.Join(dst, "tree"))
			noStrays(t)
		})
	}
	t.Run("one file", func(t *testing.T) {
		t.Parallel()
		r := s.rdmacp(t, append(keepFlags, filepath.Join(src, "a"), "target:"+t.TempDir())...)
		if r.code != 0 || !strings.Contains(r.stderr, "one file travels as is, without its xattrs, ACLs, owner or group") {
			t.Fatalf("exit %d, want 0 saying what is not kept: %s", r.code, r.stderr)
		}
	})
}

// TestKeepLikeRsync copies the same tree with rsync -aHAX --numeric-ids
// and with rdmacp's -a -H -X -A --numeric-ids, then again after owners,
// xattrs, an ACL and hard links changed (see changeMarks) and a file's
// data: each time, for every entry, the two copies have the same lstat,
// xattrs and ACLs, but the second time directories' times, which rsync
// leaves changed where it links files at the end (rdmacp's are the
// source's: sameEntries).
func TestKeepLikeRsync(t *testing.T) {
	t.Parallel()
	needTools(t, "rsync")
	s := startSSHD(t)
	src := filepath.Join(t.TempDir(), "t")
	keptTree(t, src)
	byRsync, dst := filepath.Join(t.TempDir(), "t"), t.TempDir()
	for round := range 2 {
		if round == 1 {
			changeMarks(t, src)
			writeFile(t, filepath.Join(src, "sub", "deep", "new"), "new")
			if err := errors.Join(os.Link(filepath.Join(src, "sub", "plain"), filepath.Join(src, "plain2")), os.WriteFile(filepath.Join(src, "big"), []byte("smaller"), 0o644)); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := exec.Command("rsync", "-aHAX", "--numeric-ids", src+"/", byRsync+"/").CombinedOutput(); err != nil {
			t.Fatalf("rsync: %v: %s", err, out)
		}
		r := s.rdmacp(t, "-a", "-H", "-X", "-A", "--numeric-ids", src, "target:"+dst)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("round %d: exit %d, want 0 and nothing on stderr: %s", round, r.code, r.stderr)
		}
		w, g := entries(t, byRsync), entries(t, filepath.Join(dst, "t"))
		if round == 1 {
			dirTimes(w)
			dirTimes(g)
		}
		sameDescs(t, byRsync, w, g)
		sameEntries(t, src, filepath.Join(dst, "t"))
	}
}

// dirTimes leaves the modification times out of the descriptions of
// directories in m (see entries).
func dirTimes(m map[string]string) {
	for n, d := range m {
		if strings.HasPrefix(d, "mode 40") {
			m[n] = mtimeDesc.ReplaceAllString(d, "")
		}
	}
}

// mtimeDesc is the modification time in a description (see entries).
var mtimeDesc = regexp.MustCompile(` mtime [0-9]+\.[0-9]{9}`)

// TestKeepBetween copies the tree from one remote host to another, and
// to both with --to: each copy is exact.
func TestKeepBetween(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 2)
	src := filepath.Join(c.dirs[0], "tree")
	keptTree(t, src)
	t.Run("between", func(t *testing.T) {
		clear(t, c.dirs[1])
		r := c.ssh.rdmacp(t, append(keepFlags, "h1:"+filepath.Join(c.dst, "tree"), "h2:"+c.dst+"/")...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("exit %d, want 0 and nothing on stderr: %s", r.code, r.stderr)
		}
		sameEntries(t, src, filepath.Join(c.dirs[1], "tree"))
	})
	t.Run("to", func(t *testing.T) {
		for _, d := range c.dirs {
			clear(t, d)
		}
		from := filepath.Join(t.TempDir(), "tree")
		keptTree(t, from)
		r := c.ssh.rdmacp(t, append(keepFlags, "--to", "h1,h2", from, c.dst)...)
		if r.code != 0 {
			t.Fatalf("exit %d, want 0: %s", r.code, r.stderr)
		}
		for _, d := range c.dirs {
			sameEntries(t, from, filepath.Join(d, "tree"))
		}
	})
}

// TestKeepAgain copies the kept tree with -a -H -X -A both ways, into a
// directory with a default ACL, which nothing inherits; then again: unchanged, nothing travels; after a file's owner, a link's
// group, a directory's ACL and the xattr of a file with three names
// changed (and nothing else), those are sent, itemized with rsync's o,
// g, a and x, and every entry arrives as it now is.
func TestKeepAgain(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	for _, way := range incrDirs {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			src := filepath.Join(root, "t")
			keptTree(t, src)
			dst := t.TempDir()
			if out, err := exec.Command("setfacl", "-d", "-m", "u:3456:rwx", dst).CombinedOutput(); err != nil {
				t.Fatalf("setfacl: %v: %s", err, out)
			}
			flags := []string{"-a", "-H", "-X", "-A", "--itemize-changes"}
			if r := s.incrCopy(t, append(flags, way.args(src, dst)...)...); r.code != 0 {
				t.Fatalf("first copy: exit %d: %s", r.code, r.stderr)
			}
			sameEntries(t, src, filepath.Join(dst, "t")) // nothing inherited from dst's default ACL
			if r := s.incrCopy(t, append(flags, way.args(src, dst)...)...); r.code != 0 || r.stdout != "" {
				t.Fatalf("copy of an unchanged tree: exit %d, changes %q: %s", r.code, r.stdout, r.stderr)
			}
			changeMarks(t, src)
			r := s.incrCopy(t, append(flags, way.args(src, dst)...)...)
			want := []string{way.verb + "f....o.... t/sub/plain", "cL.....g... t/sym -> a", ".d.......a. t/sub/",
				way.verb + "f........x t/a", way.verb + "f........x t/b", way.verb + "f........x t/sub/deep/c"}
			got := strings.Split(strings.TrimSpace(r.stdout), "\n")
			slices.Sort(got)
			slices.Sort(want)
			if r.code != 0 || !slices.Equal(got, want) {
				t.Fatalf("after four owners, xattrs and ACLs changed: exit %d, changes %q, want %q: %s", r.code, got, want, r.stderr)
			}
			sameEntries(t, src, filepath.Join(dst, "t"))
		})
	}
}

// changeMarks changes, in the kept tree at src, what only marks show: the
// owner of sub/plain, the group of the link sym, an ACL of sub and an
// xattr of a (and so of its other names).
func changeMarks(t *testing.T, src string) {
	t.Helper()
	p := func(n string) string { return filepath.Join(src, n) }
	if err := errors.Join(os.Lchown(p("sub/plain"), 4567, -1), os.Lchown(p("sym"), -1, 4568)); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"setfacl", "-m", "u:2345:r", p("sub")}, {"setfattr", "-n", "user.note", "-v", "changed", p("a")}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}
