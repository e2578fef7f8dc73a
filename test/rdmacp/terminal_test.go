package rdmacp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRemoteStderrEscaped runs a remote side that writes terminal control
// sequences to its stderr (scp's CVE-2019-6110 class): they reach the
// local stderr escaped, so that they can neither clear the screen nor
// overwrite a line with a fake message.
func TestRemoteStderrEscaped(t *testing.T) {
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
