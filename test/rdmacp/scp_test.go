package rdmacp

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestMissingAmongSeveral copies several sources, one of them missing,
// either way: the others arrive exact, and rdmacp exits 1 naming the
// missing one (as scp does).
func TestMissingAmongSeveral(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	file := filepath.Join(src, "f")
	makeFile(t, file, 100<<10, false)
	tree := filepath.Join(src, "tree")
	makeTree(t, tree)
	missing := filepath.Join(src, "missing")
	cases := []struct {
		name string
		args func(dst string) []string
		tree bool
	}{
		{"upload", func(dst string) []string { return []string{file, missing, "target:" + dst} }, false},
		{"upload with -r", func(dst string) []string { return []string{"-r", "-p", missing, tree, file, "target:" + dst} }, true},
		{"download", func(dst string) []string { return []string{"target:" + file, "target:" + missing, dst} }, false},
		{"download with -r", func(dst string) []string {
			return []string{"-r", "-p", "target:" + missing, "target:" + tree, "target:" + file, dst}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := t.TempDir()
			r := s.rdmacp(t, tc.args(dst)...)
			if r.code != 1 || !strings.Contains(r.stderr, missing) {
				t.Fatalf("exit %d, want 1 naming %s; stderr:\n%s", r.code, missing, r.stderr)
			}
			if hashFile(t, file) != hashFile(t, filepath.Join(dst, "f")) {
				t.Fatalf("f: content differs")
			}
			if tc.tree {
				sameTree(t, tree, filepath.Join(dst, "tree"), func(m os.FileMode) os.FileMode { return m })
			}
			noStrays(t)
		})
	}
}

// TestRemotePatternWithoutR downloads HOST:src/* without -r where the
// pattern matches a file and a directory: the file arrives, the remote
// side leaves the directory out and names it, and rdmacp exits 1 (as scp:
// "not a regular file"); nothing of the directory lands here.
func TestRemotePatternWithoutR(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src, dst := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(src, "a"), "a\n")
	if err := os.Mkdir(filepath.Join(src, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "bin", "f"), "in bin\n")
	r := s.rdmacp(t, "target:"+src+"/*", dst)
	if r.code != 1 || !strings.Contains(r.stderr, filepath.Join(src, "bin")+" is a directory: use -r") {
		t.Fatalf("exit %d, want 1 naming bin as a directory; stderr:\n%s", r.code, r.stderr)
	}
	got := snapshot(t, dst)
	if want := map[string]string{".": got["."], "a": snapshot(t, src)["a"]}; !maps.Equal(got, want) {
		t.Errorf("DST has %q, want %q", got, want)
	}
}

// TestRemotePattern downloads HOST:dir/*.txt: the remote side expands it
// (no shell: a name with shell metacharacters is just a name) and exactly
// the names it matches arrive, not those it does not, nor dot files; a
// pattern that matches nothing is the literal name, here missing, which
// fails as one missing source does (exit 2), naming it.
func TestRemotePattern(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	for _, n := range []string{"a.txt", "b;touch x.txt", ".hidden.txt", "c.log"} {
		writeFile(t, filepath.Join(src, n), n)
	}
	dst := t.TempDir()
	r := s.rdmacp(t, "target:"+src+"/*.txt", dst)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
	got, err := os.ReadDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		b, err := os.ReadFile(filepath.Join(dst, e.Name()))
		if err != nil || string(b) != e.Name() {
			t.Errorf("%s: %q, %v", e.Name(), b, err)
		}
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "a.txt,b;touch x.txt" {
		t.Errorf("got %q, want a.txt and b;touch x.txt", names)
	}
	r = s.rdmacp(t, "target:"+src+"/*.none", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, src+"/*.none: no such file or directory") {
		t.Fatalf("no match: exit %d, want 2 naming the pattern; stderr:\n%s", r.code, r.stderr)
	}
}

// TestRemoteLiteral downloads names with wildcard characters as OpenSSH's
// scp does (regress/scp.sh's "unmatched glob" cases): a pattern that
// matches nothing is the literal name, each such file arrives into a
// directory and to a new name, and the directory dd.glob[456] with -r to
// a new name; a pattern's one match to a new name becomes it; several
// matches into a file exit 3, the file kept. scp, in its SFTP mode and
// its old one (-O), against the same sshd, copies what rdmacp copies.
func TestRemoteLiteral(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	tree, one, two := filepath.Join(src, "dd.glob[456]"), filepath.Join(src, "one"), filepath.Join(src, "two")
	for _, dir := range []string{tree, one, two} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"g[1]", "copy.glob[123]", "a*b", "q?", "dd.glob[456]/copy.glob[1234]", "one/g1", "one/h", "two/g1", "two/g2"} {
		writeFile(t, filepath.Join(src, n), n+"\n")
	}
	type copyCase struct {
		name string
		args []string // flags and the source
		dst  string   // DST, under a new directory ("": that directory)
		got  string   // where the file arrives, under that directory
		want string   // the source file it is a copy of
	}
	var cases []copyCase
	for _, n := range []string{"g[1]", "copy.glob[123]", "a*b", "q?"} {
		cases = append(cases,
			copyCase{n + " into a directory", []string{"target:" + filepath.Join(src, n)}, "", n, n},
			copyCase{n + " to a new name", []string{"target:" + filepath.Join(src, n)}, "new", "new", n})
	}
	cases = append(cases,
		copyCase{"dd.glob[456] to a new name, -r", []string{"-r", "target:" + tree}, "new", "new/copy.glob[1234]", "dd.glob[456]/copy.glob[1234]"},
		copyCase{"one match to a new name", []string{"target:" + one + "/g*"}, "new", "new", "one/g1"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, cmd := range []string{"rdmacp", "scp", "scp -O"} {
				dir := t.TempDir()
				if code, out := s.copyWith(t, cmd, append(tc.args, filepath.Join(dir, tc.dst))...); code != 0 {
					t.Fatalf("%s: exit %d, want 0; stderr:\n%s", cmd, code, out)
				}
				if b, err := os.ReadFile(filepath.Join(dir, tc.got)); err != nil || string(b) != tc.want+"\n" {
					t.Fatalf("%s: %s holds %q (%v), want a copy of %s", cmd, tc.got, b, err, tc.want)
				}
			}
			noStrays(t)
		})
	}
	file := filepath.Join(t.TempDir(), "file")
	writeFile(t, file, "mine\n")
	r := s.rdmacp(t, "target:"+two+"/g*", file)
	if b, _ := os.ReadFile(file); r.code != 3 || !strings.Contains(r.stderr, file+" exists and is not a directory") || string(b) != "mine\n" {
		t.Fatalf("several matches into a file: exit %d, the file holds %q; want 3, it kept; stderr:\n%s", r.code, b, r.stderr)
	}
	if code, out := s.copyWith(t, "scp", "target:"+two+"/g*", file); code == 0 {
		t.Fatalf("scp took several matches into a file; stderr:\n%s", out)
	}
}

// copyWith runs cmd (rdmacp, or scp with its flags) against s with args,
// and returns its exit code and stderr.
func (s *sshd) copyWith(t *testing.T, cmd string, args ...string) (int, string) {
	t.Helper()
	if cmd == "rdmacp" {
		r := s.rdmacp(t, args...)
		return r.code, r.stderr
	}
	words := strings.Fields(cmd)
	c := exec.Command(words[0], append(append(words[1:], "-q", "-F", s.config), args...)...)
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		t.Fatalf("%s: %v", cmd, err)
	}
	return 0, string(out)
}

// TestURI copies to and from scp://target:PORT//PATH with -P naming a
// port nothing listens on: the URI's port is the one ssh uses. A URI
// whose port has no sshd fails to start the remote side (exit 3).
func TestURI(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	file := filepath.Join(src, "f")
	makeFile(t, file, 1<<20, false)
	up := t.TempDir()
	uri := fmt.Sprintf("scp://target:%d/", s.port)
	if r := s.rdmacp(t, "-P", "1", file, uri+up); r.code != 0 {
		t.Fatalf("upload: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	down := t.TempDir()
	if r := s.rdmacp(t, "-P", "1", uri+file, down); r.code != 0 {
		t.Fatalf("download: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, got := range []string{filepath.Join(up, "f"), filepath.Join(down, "f")} {
		if hashFile(t, got) != hashFile(t, file) {
			t.Fatalf("%s: content differs", got)
		}
	}
	if r := s.rdmacp(t, file, "scp://target:1/"+up); r.code != 3 || !strings.Contains(r.stderr, "start the remote side on target") {
		t.Fatalf("port 1: exit %d, want 3; stderr:\n%s", r.code, r.stderr)
	}
	noStrays(t)
}

// TestLimitRate copies 3 MiB at --limit-rate 1M up and down (where the
// remote side sends): exact, -v says the limit, and each takes at least
// what the rate allows (a tenth of a second's burst aside). Only the lower
// bound is checked: a loaded machine is slower, never faster.
func TestLimitRate(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	file := filepath.Join(t.TempDir(), "f")
	makeFile(t, file, 3<<20, false)
	for _, dir := range []string{"up", "down"} {
		dst := t.TempDir()
		args := []string{"-v", "--limit-rate", "1M", file, "target:" + dst}
		if dir == "down" {
			args = []string{"-v", "--limit-rate", "1M", "target:" + file, dst}
		}
		start := time.Now()
		r := s.rdmacp(t, args...)
		took := time.Since(start)
		if r.code != 0 || !strings.Contains(r.stderr, "sending at most 1 MiB/s (8 Mbit/s) (--limit-rate)") {
			t.Fatalf("%s: exit %d, want 0 saying the limit; stderr:\n%s", dir, r.code, r.stderr)
		}
		if hashFile(t, filepath.Join(dst, "f")) != hashFile(t, file) {
			t.Fatalf("%s: content differs", dir)
		}
		if least := 29 * time.Second / 10; took < least {
			t.Fatalf("%s: 3 MiB at 1 MiB/s took %v, less than %v", dir, took, least)
		}
	}
}

// TestDataPorts: --data-ports makes the receiving side listen on its
// range: a download's (this host) with every port of it taken fails with
// exit 3 naming the range; one free port works, up (the remote side
// listens) and down.
func TestDataPorts(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	file := filepath.Join(t.TempDir(), "f")
	makeFile(t, file, 1<<20, false)
	lo := testutil.FreePort(t)
	for port := lo; port <= lo+2; port++ {
		if l, err := net.Listen("tcp", fmt.Sprintf(":%d", port)); err == nil {
			defer l.Close()
		}
	}
	ports := fmt.Sprintf("%d-%d", lo, lo+2)
	// Over TCP, whose ports the listeners above hold (RoCE's rdma_cm ports
	// are a space of their own); the copies below use the harness's transport.
	r := s.rdmacp(t, "--data-ports", ports, "-t", "tcp", "target:"+file, t.TempDir())
	if r.code != 3 || !strings.Contains(r.stderr, "no free port in "+ports+" (--data-ports)") {
		t.Fatalf("ports taken: exit %d, want 3 naming %s; stderr:\n%s", r.code, ports, r.stderr)
	}
	for _, dir := range []string{"up", "down"} {
		port := testutil.FreePort(t)
		dst := t.TempDir()
		args := []string{"-v", "--data-ports", strconv.Itoa(port), file, "target:" + dst}
		if dir == "down" {
			args = []string{"-v", "--data-ports", strconv.Itoa(port), "target:" + file, dst}
		}
		r := s.rdmacp(t, args...)
		if r.code != 0 || !strings.Contains(r.stderr, fmt.Sprintf(":%d (", port)) {
			t.Fatalf("%s: exit %d, want 0 listening on port %d; stderr:\n%s", dir, r.code, port, r.stderr)
		}
		if hashFile(t, filepath.Join(dst, "f")) != hashFile(t, file) {
			t.Fatalf("%s: content differs", dir)
		}
	}
	noStrays(t)
}
