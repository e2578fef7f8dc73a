package rdmacp

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// TestRemoteStderrEscaped runs a remote side that writes terminal control
// sequences to its stderr (scp's CVE-2019-6110 class): they reach the
// local stderr escaped, so that they can neither clear the screen nor
// overwrite a line with a fake message.
func TestRemoteStderrEscaped(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	dir := t.TempDir()
	evil := filepath.Join(dir, "evil-rdmacp")
	script := "#!/bin/sh\nprintf '\\033[2J\\033[1;1Hrdmacp: copied, all is well\\r' >&2\nexit 1\n"
	if err := os.WriteFile(evil, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "f")
	makeFile(t, file, 1000, false)
	for _, args := range [][]string{{file, "target:" + t.TempDir()}, {"target:" + file, t.TempDir()}} {
		r := s.rdmacp(t, append([]string{"--remote-cmd", evil}, args...)...)
		if r.code != 3 || strings.ContainsAny(r.stderr, "\x1b\r") || !strings.Contains(r.stderr, `\u001b[2J\u001b[1;1Hrdmacp: copied, all is well\u000d`) {
			t.Errorf("%v: exit %d, want 3 and the remote's stderr escaped; stderr:\n%q", args, r.code, r.stderr)
		}
	}
}

// TestShellMetacharacters copies files whose names hold what a remote
// shell would run (scp's CVE-2020-15778 class: scp passes the remote path
// through the remote shell) both ways: the names travel as data, the
// copies are exact, and nothing runs.
func TestShellMetacharacters(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src, dst := t.TempDir(), t.TempDir()
	// A name cannot hold a slash: the commands would touch the marker in
	// the remote shell's directory (the user's home) or this one.
	marker := fmt.Sprintf("rdmacp-ran-%d", os.Getpid())
	name := "a;touch " + marker + ";$(touch " + marker + ")`touch " + marker + "`'\"\n|x"
	data := []byte("payload\n")
	if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	down := t.TempDir()
	for _, args := range [][]string{
		{filepath.Join(src, name), "target:" + dst + "/"},
		{"target:" + filepath.Join(src, name), down},
	} {
		if r := s.rdmacp(t, args...); r.code != 0 {
			t.Fatalf("%q: exit %d; stderr:\n%s", args, r.code, r.stderr)
		}
	}
	for _, dir := range []string{dst, down} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %q, %v; want the source's bytes", dir, got, err)
		}
	}
	u, err := user.Current() // sshd starts the remote shell in the passwd home
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{u.HomeDir, ".", src, dst, down} {
		if _, err := os.Lstat(filepath.Join(dir, marker)); err == nil {
			os.Remove(filepath.Join(dir, marker))
			t.Errorf("a shell ran a command from the file's name (%s)", dir)
		}
	}
}
