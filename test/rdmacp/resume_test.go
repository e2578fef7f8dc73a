package rdmacp

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestResume interrupts a 64 MiB copy (24 MiB in the VM) half-way, both
// ways and in several manners, and resumes it with -C: the result is
// exact, what had arrived when it was interrupted is kept (a failed
// copy keeps every write that finished), and the second run sends the
// rest, at most half the bytes. A source changed
// in between is copied whole, and says so. (The sending side is stopped
// the moment half has arrived, so a copy of any size many windows long
// is interrupted half-way, however fast it goes.)
func TestResume(t *testing.T) {
	t.Parallel()
	size := int64(64 << 20)
	if harness.host != "" {
		size = 24 << 20 // in the VM: its file system is in its RAM, rdma and hashing there are slow
	}
	s := startSSHD(t)
	cases := []struct {
		name     string
		download bool
		kill     string // "local" (SIGKILL), "interrupt" (local SIGINT) or "remote" (SIGKILL)
		touch    bool   // change the source's time before resuming
	}{
		{name: "upload, local side interrupted", kill: "interrupt"},
		{name: "upload, remote side killed", kill: "remote"},
		{name: "download, local side killed", download: true, kill: "local"},
		{name: "download, remote side killed", download: true, kill: "remote"},
		{name: "upload, source changed", kill: "interrupt", touch: true},
		{name: "download, source changed", download: true, kill: "interrupt", touch: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := filepath.Join(t.TempDir(), "big") // its own: a case may touch it
			makeFile(t, src, size, false)
			want := hashFile(t, src) // a touch below changes the source's times only
			dst := t.TempDir()
			args := slices.Concat(window, []string{src, "target:" + dst + "/"})
			if tc.download {
				args = slices.Concat(window, []string{"target:" + src, dst + "/"})
			}
			// At most 32 MiB/s, so that the remote side lives long enough to be seen.
			cmd := s.command(t, append([]string{"--limit-rate", "32M"}, args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			interrupt(t, cmd, tc.download, tc.kill, func() bool { return partialSize(dst, "big") >= size/2 })
			if err := cmd.Wait(); err == nil {
				t.Fatalf("the interrupted copy succeeded: %s", stderr.String())
			}
			noStrays(t)
			if _, err := os.Stat(filepath.Join(dst, "big")); err == nil {
				t.Fatal("an interrupted copy is in place")
			}
			if tc.touch {
				later := time.Now().Add(time.Hour)
				if err := os.Chtimes(src, later, later); err != nil {
					t.Fatal(err)
				}
			}
			r := s.rdmacp(t, append([]string{"-C", "-v"}, args...)...)
			if r.code != 0 {
				t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, "chunk 1048576 x depth 4") {
				t.Errorf("the stream did not take --chunk-size and --depth: %s", r.stderr)
			}
			if hashFile(t, filepath.Join(dst, "big")) != want {
				t.Fatal("the resumed copy differs from the source")
			}
			noLeftovers(t, dst, "big")
			noStrays(t)
			kept, sent := resumed(t, r.stderr)
			t.Logf("resumed: %d bytes kept, %d sent", kept, sent)
			switch {
			case tc.touch && (kept != 0 || sent != size || !strings.Contains(r.stderr, "since the partial copy (size or modification time): starting over")):
				t.Fatalf("a changed source: %d kept, %d sent, want it whole and a word: %s", kept, sent, r.stderr)
			case !tc.touch && (kept < size/2 || kept+sent != size):
				t.Fatalf("%d kept and %d sent of %d bytes, want at least the half that had arrived when the copy was interrupted kept", kept, sent, size)
			}
		})
	}
}

// TestDiskFull fills the receiving side's file system mid-copy: exit 4,
// the partial copy kept as an exact prefix, and, once there is room, a
// resume completes it exactly. (A download: the test's mounts are not
// seen in the mount namespace that sshd runs in.)
func TestDiskFull(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := filepath.Join(t.TempDir(), "f")
	makeFile(t, src, 24<<20, false)
	dst := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "rdmacp-test", dst).CombinedOutput(); err != nil {
		testutil.Unmet(t, "cannot mount a small tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dst).Run() })
	r := s.rdmacp(t, "target:"+src, dst+"/")
	if r.code != 4 || !strings.Contains(r.stderr, "no space left on device") {
		t.Fatalf("exit %d, want 4 and no space left: %s", r.code, r.stderr)
	}
	noStrays(t)
	m, _ := filepath.Glob(filepath.Join(dst, ".f.rdmacp-*.part"))
	if len(m) != 1 {
		t.Fatalf("partial copies: %v, want one", m)
	}
	part, err := os.ReadFile(m[0])
	if err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(part) == 0 || !bytes.HasPrefix(whole, part) {
		t.Fatalf("the partial copy (%d bytes) is not a prefix of the source", len(part))
	}
	if out, err := exec.Command("mount", "-o", "remount,size=64m", dst).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	r = s.rdmacp(t, "-C", "-v", "target:"+src, dst+"/")
	if r.code != 0 {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	if kept, _ := resumed(t, r.stderr); kept == 0 {
		t.Errorf("nothing of the partial copy was kept: %s", r.stderr)
	}
	if hashFile(t, src) != hashFile(t, filepath.Join(dst, "f")) {
		t.Fatal("the resumed copy differs from the source")
	}
	noLeftovers(t, dst, "f")
}

// window is the chunk size and depth of the interrupted copies and their
// resumes: a window much smaller than half a file, so that the sending
// side, stopped once half has arrived, cannot have sent the whole file
// yet and its end (the default window is larger than a file in the VM).
var window = []string{"--chunk-size", "1M", "--depth", "4"}

// interrupt interrupts the copy that cmd runs (a download, or an upload)
// once half has arrived: it stops the sending side (SIGSTOP) the moment
// half says so, so that the copy cannot finish meanwhile, however fast it
// goes; then it kills the local side ("local"), interrupts it
// ("interrupt") or kills the remote side ("remote"), and lets the sending
// side go on (SIGCONT) to meet the end.
func interrupt(t *testing.T, cmd *exec.Cmd, download bool, how string, half func() bool) {
	t.Helper()
	var remote int
	testutil.WaitFor(t, 2*time.Minute, "the remote side to start", func() bool {
		pids := remotes(t, false)
		if len(pids) == 1 {
			remote, _ = strconv.Atoi(pids[0])
		}
		return remote != 0
	})
	sender := cmd.Process.Pid
	if download {
		sender = remote
	}
	// Polled every millisecond, not with testutil.WaitFor's growing pauses:
	// the rest of the copy may take less than one of them.
	deadline := time.Now().Add(2 * time.Minute)
	for !half() {
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting 2m0s for half of the copy to arrive")
		}
		time.Sleep(time.Millisecond)
	}
	syscall.Kill(sender, syscall.SIGSTOP)
	defer syscall.Kill(sender, syscall.SIGCONT)
	switch how {
	case "local":
		cmd.Process.Kill()
	case "interrupt":
		cmd.Process.Signal(os.Interrupt)
	case "remote":
		syscall.Kill(remote, syscall.SIGKILL)
	}
}

// partialSize is the size of the partial copy of name in dir (0 if none).
func partialSize(dir, name string) int64 {
	m, _ := filepath.Glob(filepath.Join(dir, "."+name+".rdmacp-*.part"))
	var n int64
	for _, p := range m {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			n = max(n, st.Size)
		}
	}
	return n
}

// resumed reads -v's summary of a resumed copy: the bytes kept from the
// partial copy and those sent.
func resumed(t *testing.T, stderr string) (kept, sent int64) {
	t.Helper()
	m := regexp.MustCompile(`(\d+) bytes in .*resumed: (\d+) bytes of a partial copy kept`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no summary of a resumed copy: %s", stderr)
	}
	sent, _ = strconv.ParseInt(m[1], 10, 64)
	kept, _ = strconv.ParseInt(m[2], 10, 64)
	return kept, sent
}

// TestResumeTree interrupts a -r copy of a tree half-way, both ways, and
// resumes it with -C -r: the tree arrives exact (contents, modes, times),
// the files already in place and the partial one are kept, and the rest
// travels.
func TestResumeTree(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := filepath.Join(t.TempDir(), "tree")
	makeTree(t, src)
	each, files := int64(64<<20), int64(6)
	if harness.host != "" {
		each = 6 << 20 // in the VM: its file system is in its RAM, rdma and hashing there are slow
	}
	for i := range files {
		makeFile(t, filepath.Join(src, "sub", "big"+strconv.FormatInt(i, 10)), each, false)
	}
	// makeTree's old times, which the big files' creation changed
	old := time.Date(2003, 4, 5, 6, 7, 8, 123456789, time.UTC)
	if err := os.Chtimes(filepath.Join(src, "sub"), old, old); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		download bool
		newName  bool
	}{
		{name: "upload into a directory"},
		{name: "download into a directory", download: true},
		{name: "upload to a new name", newName: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			dst, got := dir, filepath.Join(dir, "tree")
			if tc.newName {
				dst = filepath.Join(dir, "copy")
				got = dst
			}
			args := slices.Concat(window, []string{"-r", "-p", src, "target:" + dst})
			if tc.download {
				args = slices.Concat(window, []string{"-r", "-p", "target:" + src, dst})
			}
			// At most 32 MiB/s, so that the remote side lives long enough to be seen.
			cmd := s.command(t, append([]string{"--limit-rate", "32M"}, args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			interrupt(t, cmd, tc.download, "interrupt", func() bool { return treeSize(got) >= files*each/2 })
			if err := cmd.Wait(); err == nil {
				t.Fatalf("the interrupted copy succeeded: %s", stderr.String())
			}
			noStrays(t)
			r := s.rdmacp(t, append([]string{"-C", "-v"}, args...)...)
			if r.code != 0 {
				t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
			}
			sameTree(t, src, got, func(m fs.FileMode) fs.FileMode { return m })
			kept, sent := resumed(t, r.stderr)
			t.Logf("resumed: %d bytes kept, %d sent", kept, sent)
			if kept < files*each/4 || sent > files*each*3/4+1<<20 {
				t.Fatalf("%d bytes kept and %d sent of %d, want about half kept", kept, sent, files*each)
			}
			noStrays(t)
		})
	}
}

// treeSize is the size of the regular files under dir, partial copies
// included.
func treeSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
