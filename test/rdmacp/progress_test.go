package rdmacp

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// treeEntries are the entries of makeTree's tree: directories, files and
// links.
const treeEntries = 12

// TestProgressOnTerminal copies a tree up and down with stderr on a
// pseudo-terminal: --progress (or -v there) redraws a progress line that
// ends with every entry and byte passed.
func TestProgressOnTerminal(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := filepath.Join(t.TempDir(), "tree")
	makeTree(t, src)
	for _, args := range [][]string{
		{"-r", "--progress", src, "target:" + t.TempDir()},
		{"-r", "--progress", "target:" + src, t.TempDir()},
		{"-a", "-v", src, "target:" + t.TempDir()},
		{"-a", "-v", "target:" + src, t.TempDir()},
	} {
		code, out := onTerminal(t, s.command(t, args...))
		last := lastProgress(out)
		if code != 0 || !strings.Contains(out, "\r   0% ") || !strings.Contains(last, " 100% |") ||
			!strings.HasSuffix(last, "(xfr#4, to-chk=0/"+strconv.Itoa(treeEntries)+")") {
			t.Errorf("%q: exit %d, want 0 and a progress line redrawn up to every entry; stderr:\n%q", args, code, out)
		}
	}
}

// TestProgressOffTerminal copies a tree up and down with stderr on a
// pipe: without --progress nothing but the usual output (none, or -v's
// summary), with it a line at most a second, each ending in a newline.
func TestProgressOffTerminal(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := filepath.Join(t.TempDir(), "tree")
	makeTree(t, src)
	for _, down := range []bool{false, true} {
		cp := func(flags ...string) run {
			if down {
				return s.rdmacp(t, append(flags, "target:"+src, t.TempDir())...)
			}
			return s.rdmacp(t, append(flags, src, "target:"+t.TempDir())...)
		}
		if r := cp("-r"); r.code != 0 || r.stderr != "" {
			t.Errorf("down %v: exit %d, want 0 and nothing on stderr; stderr:\n%s", down, r.code, r.stderr)
		}
		if r := cp("-r", "-v"); r.code != 0 || strings.Contains(r.stderr, "to-chk") || !strings.Contains(r.stderr, " bytes in ") {
			t.Errorf("down %v: -v: exit %d, want 0 and the summary alone; stderr:\n%s", down, r.code, r.stderr)
		}
		r := cp("-r", "--progress")
		if r.code != 0 || strings.Contains(r.stderr, "\r") || !strings.HasSuffix(r.stderr, "(xfr#4, to-chk=0/"+strconv.Itoa(treeEntries)+")\n") {
			t.Errorf("down %v: --progress: exit %d, want 0 and lines that end at every entry; stderr:\n%q", down, r.code, r.stderr)
		}
	}
}

// lastProgress is the last progress line drawn in out, without the
// blanks that wipe a longer line before it.
func lastProgress(out string) string {
	lines := strings.FieldsFunc(out, func(r rune) bool { return r == '\r' || r == '\n' })
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "to-chk=") {
			return strings.TrimRight(lines[i], " ")
		}
	}
	return ""
}

// onTerminal runs cmd with its stderr on a new pseudo-terminal and
// returns its exit code and what it wrote there.
func onTerminal(t *testing.T, cmd *exec.Cmd) (int, string) {
	t.Helper()
	ptm, pts := openPTY(t)
	cmd.Stderr = pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	var out bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(&out, ptm)
		copied <- err
	}()
	err := cmd.Wait()
	if err := <-copied; err != nil && !errors.Is(err, unix.EIO) { // EIO: the terminal's last writer closed it
		t.Fatal(err)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, out.String()
}

// openPTY opens a new pseudo-terminal: its master and its slave.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0); err != nil {
		t.Fatal(err)
	}
	return ptm, pts
}
