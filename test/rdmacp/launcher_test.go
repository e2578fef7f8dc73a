package rdmacp

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// launcherCluster starts n hosts for a test of launchers other than ssh:
// each in a network namespace of its own, so that a launcher can name
// each by its address (it knows nothing of the test's ssh config).
func launcherCluster(t *testing.T, n int, launcher string) *cluster {
	t.Helper()
	if harness.host != "" {
		t.Skip("launchers are tested on the host: in the VM the hosts share one address")
	}
	if _, err := exec.LookPath(launcher); err != nil {
		testutil.Unmet(t, "no %s: scripts/deps.sh installs it", launcher)
	}
	c := startCluster(t, n)
	if !c.netns {
		testutil.Unmet(t, "no network namespaces: the hosts share one address")
	}
	return c
}

func TestLauncher(t *testing.T) {
	t.Parallel()
	c := launcherCluster(t, 3, "clush")
	src := t.TempDir()
	data := make([]byte, 3<<20+5)
	rand.NewChaCha8([32]byte{21}).Read(data)
	writeFile(t, filepath.Join(src, "f.bin"), string(data))
	// clush runs ssh with the test's config; -N: no host names before
	// the remote side's lines; stdin goes to the remote side.
	launcher := "clush -N -o -F" + c.ssh.config + " -w %h"
	here := t.TempDir()
	cases := []struct {
		name string
		args []string
		got  []string // where the copy is, as this process sees it
	}{
		{"to three hosts", []string{"--to", strings.Join(c.addrs, ","), filepath.Join(src, "f.bin"), c.dst},
			[]string{filepath.Join(c.dirs[0], "f.bin"), filepath.Join(c.dirs[1], "f.bin"), filepath.Join(c.dirs[2], "f.bin")}},
		{"upload", []string{filepath.Join(src, "f.bin"), c.addrs[1] + ":" + c.dst + "/up.bin"}, []string{filepath.Join(c.dirs[1], "up.bin")}},
		{"download", []string{c.addrs[2] + ":" + c.dst + "/f.bin", here}, []string{filepath.Join(here, "f.bin")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := finish(t, rdmacpCommand(t, append([]string{"-v", "--launcher", launcher}, tc.args...)...))
			if r.code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, p := range tc.got {
				if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
					t.Errorf("%s: %d bytes (%v), want %d identical ones", p, len(got), err, len(data))
				}
			}
		})
	}
	t.Run("a user with a launcher", func(t *testing.T) {
		r := finish(t, rdmacpCommand(t, "--launcher", launcher, filepath.Join(src, "f.bin"), "root@"+c.addrs[0]+":"+c.dst))
		if r.code != 2 || !strings.Contains(r.stderr, "name the host alone") {
			t.Errorf("exit %d, want 2 and the reason; stderr:\n%s", r.code, r.stderr)
		}
	})
	noStrays(t)
}

// TestPdshBroadcast starts the receivers of a broadcast with pdsh (its
// ssh module, against the test's sshds), one command for every host, as
// an operator would on a cluster, and sends to them with rdmasend --to at
// once: --wait covers receivers whose login is slow, down the chain too.
func TestPdshBroadcast(t *testing.T) {
	t.Parallel()
	c := launcherCluster(t, 3, "pdsh")
	bins := filepath.Dir(bin)
	for _, name := range []string{"rdmasend", "rdmarecv"} {
		if _, err := os.Stat(filepath.Join(bins, name)); err != nil {
			testutil.Unmet(t, "no %s next to rdmacp: %v", name, err)
		}
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	writeFile(t, key, "a shared secret for the broadcast test")
	data := make([]byte, 4<<20+3)
	rand.NewChaCha8([32]byte{22}).Read(data)
	in := filepath.Join(dir, "in")
	writeFile(t, in, string(data))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recv := filepath.Join(bins, "rdmarecv") + " -t " + harness.transport + " --key-file " + key + " --relay > " + c.dst + "/out"
	pdsh := exec.CommandContext(ctx, "pdsh", "-R", "ssh", "-w", strings.Join(c.addrs, ","), recv)
	pdsh.Env = tagged(t, append(os.Environ(), "PDSH_SSH_ARGS=-F "+c.ssh.config+" -x %h"))
	var pdshOut bytes.Buffer
	pdsh.Stdout, pdsh.Stderr = &pdshOut, &pdshOut
	if err := pdsh.Start(); err != nil {
		t.Fatal(err)
	}
	// Should the test fail, no receiver it started stays behind.
	t.Cleanup(func() {
		for _, pid := range ours(t, "^"+regexp.QuoteMeta(filepath.Join(bins, "rdmarecv"))) {
			exec.Command("kill", "-KILL", pid).Run()
		}
	})
	send := exec.CommandContext(ctx, filepath.Join(bins, "rdmasend"), "-v", "-t", harness.transport, "--key-file", key, "--wait", "30s", "--to", strings.Join(c.addrs, ","))
	send.Stdin = bytes.NewReader(data)
	out, err := send.CombinedOutput()
	if err != nil {
		t.Fatalf("rdmasend: %v\n%s", err, out)
	}
	if err := pdsh.Wait(); err != nil {
		t.Fatalf("pdsh: %v\n%s", err, pdshOut.String())
	}
	if !strings.Contains(string(out), "written by all 3 receivers") {
		t.Errorf("rdmasend -v does not count 3 receivers:\n%s", out)
	}
	for i, d := range c.dirs {
		if got, err := os.ReadFile(filepath.Join(d, "out")); err != nil || !bytes.Equal(got, data) {
			t.Errorf("host %d wrote %d bytes (%v), want %d identical ones", i+1, len(got), err, len(data))
		}
	}
}
