// Package rdmacp holds the end-to-end tests of the rdmacp command: they
// build it (github.com/rdmapipe/rdmapipe/cmd/rdmacp) and copy through a
// real sshd started for the test. It has no code besides its tests.
package rdmacp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// bin is the rdmacp binary the tests run, on both sides.
var bin string

func TestMain(m *testing.M) {
	switch {
	case len(os.Args) > 1 && os.Args[1] == olderPeerFlag: // run by TestOlderPeer's ssh
		os.Exit(olderPeer(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	case len(os.Args) > 1 && os.Args[1] == "hostile": // the remote side of TestHostileRemote
		os.Exit(hostileMain(os.Args[2:]))
	case len(os.Args) > 1 && os.Args[1] == hostileChainFlag: // the sending side of TestHostileBetweenTo
		os.Exit(hostileChain(os.Args[2:]))
	}
	// rdmasend and rdmarecv too, for launcher tests (see TestPdshBroadcast).
	// Without -race: the copies move GiBs through both sides, which the
	// race detector would slow several times over; the end-to-end suite
	// (test/e2e) runs the engine's commands with it.
	dir, err := testutil.Commands(false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the commands:", err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "rdmacp")
	os.Exit(m.Run())
}

// run is one finished rdmacp.
type run struct {
	code   int
	stderr string
}

// rdmacp runs the binary against s with args (flags, sources, target).
func (s *sshd) rdmacp(t *testing.T, args ...string) run {
	t.Helper()
	return finish(t, s.command(t, args...))
}

// finish runs cmd, an rdmacp, to its end.
func finish(t *testing.T, cmd *exec.Cmd) run {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	r := run{stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run rdmacp: %v", err)
	}
	return r
}

// command is the rdmacp command for args, pointed at s's ssh config and
// at this binary on the remote side, over the harness's transport (TCP
// unless the harness says otherwise).
func (s *sshd) command(t *testing.T, args ...string) *exec.Cmd {
	return rdmacpCommand(t, append([]string{"-F", s.config}, args...)...)
}

// rdmacpCommand is the rdmacp command for args, with this binary on the
// remote side, over the harness's transport, tagged as t's (see tag).
func rdmacpCommand(t *testing.T, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Bound(2*time.Minute))
	t.Cleanup(cancel)
	full := append([]string{"--remote-cmd", bin, "-t", harness.transport}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Env = tagged(t, os.Environ())
	return cmd
}

// testTag names the variable that marks the processes a test starts, on
// the remote side too (the ssh client sends it, sshd accepts it): tests
// that run at once each find only their own remote sides.
const testTag = "RDMACP_TEST"

// tagged returns env with t's tag.
func tagged(t *testing.T, env []string) []string {
	return append(env, testTag+"="+t.Name())
}

// remotes returns the process ids of the remote sides (rdmacp
// --remote-receive or --remote-send of this binary) that t (or its
// subtests) started and that still run; with shells, those of the shells
// that ssh started them with too.
func remotes(t *testing.T, shells bool) []string {
	pattern := "^" + regexp.QuoteMeta(bin) + " --remote-(receive|send)"
	if shells {
		pattern = pattern[1:]
	}
	return ours(t, pattern)
}

// ours returns the process ids of the processes whose command line
// matches pattern (as pgrep -f) and that t or its subtests started.
func ours(t *testing.T, pattern string) []string {
	out, err := exec.Command("pgrep", "-f", "--", pattern).Output()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return nil
	case err != nil:
		t.Fatalf("pgrep: %v", err)
	}
	var pids []string
	for _, pid := range strings.Fields(string(out)) {
		env, err := os.ReadFile("/proc/" + pid + "/environ")
		if err != nil {
			continue // gone meanwhile
		}
		for _, v := range strings.Split(string(env), "\x00") {
			if tag, ok := strings.CutPrefix(v, testTag+"="); ok && (tag == t.Name() || strings.HasPrefix(tag, t.Name()+"/")) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// noStrays fails t if a remote side is still running a little after a copy
// ended (it exits when its stream or ssh session ends).
func noStrays(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "the remote side to exit", func() bool { return len(remotes(t, true)) == 0 })
}

func TestCopyFile(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	cases := []struct {
		name     string
		size     int64
		sparse   bool
		preserve bool
		big      bool
	}{
		{name: "empty", size: 0},
		{name: "one byte", size: 1, preserve: true},
		{name: "random 3 MiB", size: 3<<20 + 17, preserve: true},
		{name: "sparse, big", size: 1 << 30, sparse: true, big: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			size := tc.size
			if tc.big && testing.Short() {
				size = 64 << 20 // the VM's writable filesystem is in its RAM
			}
			name := filepath.Join(src, strings.ReplaceAll(tc.name, " ", "_"))
			makeFile(t, name, size, tc.sparse)
			if err := os.Chmod(name, 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(name, mtime, mtime); err != nil {
				t.Fatal(err)
			}
			dst := t.TempDir()
			args := []string{name, "target:" + dst + "/"}
			if tc.preserve {
				args = append([]string{"-p"}, args...)
			}
			r := s.rdmacp(t, args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			got := filepath.Join(dst, filepath.Base(name))
			sameContent(t, name, got)
			fi, err := os.Stat(got)
			if err != nil {
				t.Fatal(err)
			}
			if tc.preserve && (fi.Mode() != 0o640 || !fi.ModTime().Equal(mtime)) {
				t.Errorf("-p: mode %v, mtime %v; want -rw-r----- and %v", fi.Mode(), fi.ModTime(), mtime)
			}
			if !tc.preserve && fi.ModTime().Equal(mtime) {
				t.Errorf("without -p the mtime was copied too")
			}
			noLeftovers(t, dst, filepath.Base(name))
			noStrays(t)
		})
	}
}

// TestCopyToNewName copies a file to a new name with -v: the summary line,
// and the remote side listening only on the address the ssh connection
// arrived on, or on the one --data-host names.
func TestCopyToNewName(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	name := filepath.Join(t.TempDir(), "f")
	makeFile(t, name, 1000, false)
	cases := []struct {
		name  string
		flags []string
		says  string
	}{
		{"ssh address", nil, "(the address the ssh connection arrived on)"},
		{"data host", []string{"--data-host", s.addr}, "(the address of --data-host)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := filepath.Join(t.TempDir(), "renamed")
			r := s.rdmacp(t, append(append([]string{"-v"}, tc.flags...), name, "target:"+dst)...)
			listening := "listening on " + s.addr + ":"
			if r.code != 0 || !strings.Contains(r.stderr, "1000 bytes in") || !strings.Contains(r.stderr, listening) || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("exit %d, want 0, a summary and %q %q: %s", r.code, listening, tc.says, r.stderr)
			}
			if hashFile(t, name) != hashFile(t, dst) {
				t.Fatal("content differs")
			}
		})
	}
}

// makeFile writes size bytes of random data to name, or makes it a hole
// of that size.
func makeFile(t *testing.T, name string, size int64, sparse bool) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if sparse {
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		return
	}
	rnd, err := os.Open("/dev/urandom")
	if err != nil {
		t.Fatal(err)
	}
	defer rnd.Close()
	if _, err := io.CopyN(f, rnd, size); err != nil {
		t.Fatal(err)
	}
}

// hashFile returns the XXH3 128-bit hash of the file at name (the
// SoftRoCE VM's emulated CPU computes it 40 times as fast as SHA-256).
func hashFile(t *testing.T, name string) [16]byte {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := xxh3.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return h.Sum128().Bytes()
}

// sameContent fails t unless the files at want and got hold the same
// bytes. It reads only the ranges that either holds as data (SEEK_DATA),
// where their bytes are compared: the rest is holes in both, which read
// as zeros; so a sparse file of a GiB is compared in what its data takes.
func sameContent(t *testing.T, want, got string) {
	t.Helper()
	fw, sw := openSized(t, want)
	fg, sg := openSized(t, got)
	if sw != sg {
		t.Fatalf("%s has %d bytes, want %d (as %s)", got, sg, sw, want)
	}
	bw, bg := make([]byte, 1<<20), make([]byte, 1<<20)
	for _, ext := range append(dataExtents(t, fw, sw), dataExtents(t, fg, sg)...) {
		for off := ext[0]; off < ext[1]; off += int64(len(bw)) {
			n := min(int64(len(bw)), ext[1]-off)
			if _, err := fw.ReadAt(bw[:n], off); err != nil {
				t.Fatal(err)
			}
			if _, err := fg.ReadAt(bg[:n], off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(bw[:n], bg[:n]) {
				t.Fatalf("%s differs from %s in the MiB at %d", got, want, off)
			}
		}
	}
}

// openSized opens name for reading, closed at the end of t, and returns
// its size.
func openSized(t *testing.T, name string) (*os.File, int64) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return f, fi.Size()
}

// dataExtents returns the [start, end) ranges of f's first size bytes
// that hold data (the holes between them read as zeros).
func dataExtents(t *testing.T, f *os.File, size int64) [][2]int64 {
	t.Helper()
	var out [][2]int64
	for off := int64(0); off < size; {
		start, err := f.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole from off on
		}
		if err != nil {
			t.Fatalf("seek data in %s: %v", f.Name(), err)
		}
		end, err := f.Seek(start, unix.SEEK_HOLE)
		if err != nil {
			t.Fatalf("seek hole in %s: %v", f.Name(), err)
		}
		out = append(out, [2]int64{start, min(end, size)})
		off = end
	}
	return out
}

// isRegular reports whether name is a regular file (not a link to one).
func isRegular(name string) bool {
	fi, err := os.Lstat(name)
	return err == nil && fi.Mode().IsRegular()
}

// umask returns this process's umask (which sshd passes on to the remote
// side), read without setting it, which tests running at once would see.
func umask(t *testing.T) fs.FileMode {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				t.Fatalf("/proc/self/status: %q: %v", line, err)
			}
			return fs.FileMode(m)
		}
	}
	t.Fatal("/proc/self/status has no Umask line")
	return 0
}

// noLeftovers fails t if dir holds a temporary file of rdmacp's for name.
func noLeftovers(t *testing.T, dir, name string) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(dir, "."+name+".rdmacp-*")); len(m) > 0 {
		t.Errorf("temporary files left behind: %v", m)
	}
}

// TestCopyTree copies trees: with -p modes arrive exactly (setuid too);
// without, less the remote umask and without setuid and setgid.
func TestCopyTree(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	tree := filepath.Join(src, "tree")
	makeTree(t, tree)
	other := filepath.Join(src, "other.txt")
	makeFile(t, other, 5000, false)
	exact := func(m fs.FileMode) fs.FileMode { return m }
	mask := umask(t) // the remote side's, which sshd passes on from this process
	plain := func(m fs.FileMode) fs.FileMode {
		if m&fs.ModeSymlink != 0 {
			return m
		}
		m &^= fs.ModeSetuid | fs.ModeSetgid | mask
		if !m.IsDir() {
			m &^= fs.ModeSticky
		}
		return m
	}
	cases := []struct {
		name   string
		flags  []string
		srcs   []string
		dst    func(dir string) string // the target's DST
		copies map[string]string       // source -> where it must land, relative to dir
		mode   func(fs.FileMode) fs.FileMode
	}{
		{"into a directory, -p", []string{"-p"}, []string{tree}, func(d string) string { return d + "/" },
			map[string]string{tree: "tree"}, exact},
		{"as a new name", nil, []string{tree}, func(d string) string { return d + "/copy" },
			map[string]string{tree: "copy"}, plain},
		{"several sources", nil, []string{tree, other}, func(d string) string { return d },
			map[string]string{tree: "tree", other: "other.txt"}, plain},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			r := s.rdmacp(t, append(append(append([]string{"-r"}, tc.flags...), tc.srcs...), "target:"+tc.dst(dir))...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for from, to := range tc.copies {
				sameTree(t, from, filepath.Join(dir, to), tc.mode)
			}
			noStrays(t)
		})
	}
}

// makeTree makes a directory tree with files of several modes (setuid
// among them), links inside and out, an empty and a read-only directory,
// and old times.
func makeTree(t *testing.T, root string) {
	t.Helper()
	old := time.Date(2003, 4, 5, 6, 7, 8, 123456789, time.UTC)
	for _, d := range []string{"", "sub", "sub/deep", "empty", "ro"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := []struct {
		name string
		size int64
		mode fs.FileMode
	}{
		{"a.txt", 100, 0o640},
		{"zero", 0, 0o600},
		{"sub/deep/tool", 70000, 0o755 | fs.ModeSetuid},
		{"ro/inside", 10, 0o444},
	}
	for _, f := range files {
		name := filepath.Join(root, f.name)
		makeFile(t, name, f.size, false)
		if err := os.Chmod(name, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"sub/up": "../a.txt", "abs": "/etc/hostname", "dangling": "nowhere"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "sub/deep"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, old, old.Add(time.Duration(len(p))*time.Second))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sameTree fails t unless the tree at got has the same entries as want,
// with the same types, permission bits (those of want as mode makes them),
// modification times, contents and link targets.
func sameTree(t *testing.T, want, got string, mode func(fs.FileMode) fs.FileMode) {
	t.Helper()
	entries := func(root string, mode func(fs.FileMode) fs.FileMode) map[string]string {
		m := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			desc := mode(fi.Mode()).String()
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				desc += " -> " + target
			case fi.Mode().IsRegular():
				desc += fmt.Sprintf(" %s %d bytes", fi.ModTime().UTC().Format(time.RFC3339Nano), fi.Size())
			default:
				desc += " " + fi.ModTime().UTC().Format(time.RFC3339Nano)
			}
			m[rel] = desc
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	w, g := entries(want, mode), entries(got, func(m fs.FileMode) fs.FileMode { return m })
	for name, desc := range w {
		switch {
		case g[name] != desc:
			t.Errorf("%s: got %q, want %q", name, g[name], desc)
		case isRegular(filepath.Join(want, name)):
			sameContent(t, filepath.Join(want, name), filepath.Join(got, name))
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			t.Errorf("%s: not in the source", name)
		}
	}
}

// TestCopyErrors: what cannot be copied, either way, fails with the exit
// code and message it should, and leaves no process behind.
func TestCopyErrors(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	file := filepath.Join(src, "f")
	makeFile(t, file, 10, false)
	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"unreachable host", []string{file, "down:/tmp/"}, 3, "start the remote side on down over ssh"},
		{"remote directory missing", []string{file, "target:/nonexistent/dir/f"}, 3, "destination directory /nonexistent/dir does not exist"},
		{"remote tree directory missing", []string{"-r", src, file, "target:/nonexistent/dir"}, 3, "does not exist"},
		{"missing source", []string{filepath.Join(src, "missing"), "target:/tmp/"}, 2, "no such file"},
		{"directory without -r", []string{src, "target:/tmp/"}, 2, "use -r"},
		{"no host", []string{file, "/tmp/x"}, 2, "[user@]HOST:DST"},
		{"between two hosts, the second down", []string{"target:" + file, "down:/tmp/"}, 3, "start the remote side on down over ssh"},
		// (sysfs refuses new files and directories, even root's)
		{"remote directory not writable", []string{file, "target:/sys/"}, 3, "\"open /sys/.f.rdmacp-"},
		{"remote tree directory not writable", []string{"-r", src, "target:/sys/"}, 3, "/sys/ is not writable"},
		{"destination is a device", []string{file, "target:/dev/null"}, 3, `/dev/null\" is a device: not replaced`},
		{"remote command missing", []string{"--remote-cmd", "/nonexistent/rdmacp", file, "target:/tmp/"}, 3, "exit status 127"},
		{"chunk size not a size", []string{"--chunk-size", "lots", file, "target:/tmp/"}, 2, `--chunk-size: "lots" is not a size`},
		{"depth out of range", []string{"--depth", "2", file, "target:/tmp/"}, 2, "depth 2 out of range"},
		{"compression asked for", []string{"-z", file, "target:/tmp/"}, 2, "rdmacp does not compress"},
		{"a timeout without its unit", []string{"--timeout", "5", file, "target:/tmp/"}, 2, "--timeout 5: a duration needs its unit"},
		{"an ssh port out of range", []string{"-P", "99999", file, "target:/tmp/"}, 2, "--ssh-port 99999: must be 1 to 65535"},
		{"a rate of 0", []string{"--limit-rate", "0", file, "target:/tmp/"}, 2, "for no limit leave --limit-rate out"},
		// downloads
		{"remote source missing", []string{"target:" + src + "/missing", t.TempDir()}, 2, "no such file or directory"},
		{"remote directory without -r", []string{"target:" + src, t.TempDir()}, 2, "use -r"},
		{"local directory missing", []string{"target:" + file, "/nonexistent/dir/f"}, 3, "destination directory /nonexistent/dir does not exist"},
		// (sysfs refuses new files, even root's)
		{"local directory not writable", []string{"target:" + file, "/sys/"}, 3, "permission denied"},
		{"local tree directory not writable", []string{"-r", "target:" + src, "/sys/"}, 3, "/sys/ is not writable"},
		{"sources on two hosts", []string{"target:" + file, "down:" + file, t.TempDir()}, 2, "different hosts"},
		{"source here and there", []string{"target:" + file, file, t.TempDir()}, 2, "every source must be [user@]HOST:SRC"},
		{"no host at all", []string{file, t.TempDir()}, 2, "names a host"},
		{"unreachable host to copy from", []string{"down:" + file, t.TempDir()}, 3, "start the remote side on down over ssh"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := s.rdmacp(t, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("exit %d, want %d with %q; stderr:\n%s", r.code, tc.code, tc.says, r.stderr)
			}
			if strings.Contains(r.stderr, ".part: open ") {
				t.Fatalf("a path said twice; stderr:\n%s", r.stderr)
			}
			noStrays(t)
		})
	}
}

// TestKilledMidStream kills one side while a stream is on its way: the
// other side exits non-zero (the local one saying why), no remote process
// stays behind, and no partial file appears under the destination name.
func TestKilledMidStream(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	// Only big's first MiB travels, but the remote side goes on for
	// seconds after it has arrived: archive/tar hands it the 256 GiB hole
	// after it as zeros, which it reads (and skips) until the end.
	big := filepath.Join(t.TempDir(), "big")
	sparseFile(t, big, 256<<30, 0)
	cases := []struct {
		name   string
		remote bool      // kill the remote side (else signal the local one)
		sig    os.Signal // for the local side
		code   int       // the local side's exit code, when it lives to say
		says   string    // and what it says
	}{
		{name: "remote side killed", remote: true, code: 4, says: "remote rdmacp was killed"},
		{name: "local side killed", sig: os.Kill},
		{name: "local side interrupted", sig: os.Interrupt, code: 4, says: "interrupted (SIGINT)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := t.TempDir()
			cmd := s.command(t, big, "target:"+dst+"/")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, time.Minute, "data to arrive", func() bool { return arrived(dst, "big") })
			if tc.remote {
				pids := remotes(t, false)
				if len(pids) != 1 {
					t.Fatalf("remote sides running: %v, want one", pids)
				}
				if err := exec.Command("kill", "-KILL", pids[0]).Run(); err != nil {
					t.Fatal(err)
				}
			} else if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("rdmacp: %v, want a failure", err)
			}
			if tc.code != 0 && (ee.ExitCode() != tc.code || !strings.Contains(stderr.String(), tc.says)) {
				t.Fatalf("exit %d, want %d saying %q; stderr:\n%s", ee.ExitCode(), tc.code, tc.says, stderr.String())
			}
			t.Logf("rdmacp said: %s", stderr.String())
			noStrays(t)
			if _, err := os.Stat(filepath.Join(dst, "big")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a partial copy is in place: %v", err)
			}
			if !tc.remote {
				noLeftovers(t, dst, "big") // a sparse file's copy is no prefix to keep
			}
		})
	}
}

// arrived says whether some of name's data is in its temporary file in dir.
func arrived(dir, name string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "."+name+".rdmacp-*"))
	for _, p := range m {
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
			return true
		}
	}
	return false
}
