package rdmacp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// sshd is an OpenSSH server started by a test, with a throw-away host key
// and user key: on the harness's host address when it names one, else
// inside a network namespace of its own when the test may make one (else
// on loopback).
type sshd struct {
	addr   string // the address sshd (and the remote side) can be reached at
	port   int    // sshd's port
	config string // an ssh client config: hosts "target" (this sshd) and "down" (nothing listening)
	netns  string // the network namespace sshd runs in, empty on loopback
}

// startSSHD starts an sshd for t, stopped (and its namespace removed) at
// the end of t.
func startSSHD(t *testing.T) *sshd {
	t.Helper()
	canRunSSHD(t)
	dir := sshKeys(t)
	s := &sshd{}
	port := 22
	var wrap []string
	var addr string
	if harness.host != "" {
		addr, port = harness.host, testutil.FreePort(t)
	} else if harness.transport == "rdma" {
		t.Fatal("RDMAPIPE_CP_TRANSPORT=rdma needs RDMAPIPE_CP_HOST, an address of an RDMA device")
	} else if ns, a, err := makeNetns(t); err != nil {
		t.Logf("no network namespace (%v): sshd on loopback", err)
		addr, port = "127.0.0.1", testutil.FreePort(t)
	} else {
		s.netns, addr = ns, a
		wrap = []string{"ip", "netns", "exec", ns}
	}
	s.addr, s.port = addr, port
	s.config = filepath.Join(dir, "ssh_config")
	writeFile(t, s.config, fmt.Sprintf(`Host target
  HostName %s
  Port %d
`, addr, port)+clientConfig(t, dir))
	runSSHD(t, dir, "sshd_config", wrap, addr, port)
	return s
}

// canRunSSHD skips t (fails it in the VM, where the harness asked for
// it, and under testutil.StrictEnv) where the tests cannot run an sshd.
func canRunSSHD(t *testing.T) {
	t.Helper()
	unmet := func(why string) { testutil.Unmet(t, "%s", why) }
	if harness.host != "" {
		unmet = func(why string) { t.Fatal(why) } // asked for (in the VM): no silent pass
	}
	if _, err := exec.LookPath("/usr/sbin/sshd"); err != nil {
		unmet("no /usr/sbin/sshd: install openssh-server (scripts/deps.sh does)")
	}
	if os.Geteuid() != 0 {
		unmet("sshd for the test needs root")
	}
}

// sshKeys makes a directory with a throw-away host key and user key.
func sshKeys(t *testing.T) string {
	dir := t.TempDir()
	for _, key := range []string{"host", "user"} {
		out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, key)).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
	}
	// sshd refuses to start without its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// clientConfig is the end of an ssh client config for the keys in dir:
// host "down" (nothing listening), then settings for every host, which
// send the test's tag (see testTag). The key exchange is plain X25519:
// OpenSSH's default, sntrup761x25519, took 3 of a login's 4.5 s in the
// SoftRoCE VM's emulated CPU.
func clientConfig(t *testing.T, dir string) string {
	return fmt.Sprintf(`Host down
  HostName 127.0.0.1
  Port %d
Host *
  User root
  KexAlgorithms curve25519-sha256
  IdentityFile %s
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile %s
  BatchMode yes
  ConnectTimeout 10
  LogLevel ERROR
  SendEnv %s
`, testutil.FreePort(t), filepath.Join(dir, "user"), filepath.Join(dir, "known_hosts"), testTag)
}

// runSSHD starts sshd with the keys in dir on addr:port, under the
// command wrap (if any), stopped at the end of t, and waits until it
// accepts connections. name is its config file's in dir.
func runSSHD(t *testing.T, dir, name string, wrap []string, addr string, port int) {
	cfg := filepath.Join(dir, name)
	writeFile(t, cfg, fmt.Sprintf(`Port %d
ListenAddress %s
HostKey %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile none
StrictModes no
Subsystem sftp internal-sftp
AcceptEnv %s
`, port, addr, filepath.Join(dir, "host"), filepath.Join(dir, "user.pub"), testTag))
	log := &testutil.Buffer{}
	argv := append(wrap, withoutBashrc(t)...)
	argv = append(argv, "/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	// A session's process that outlives sshd (a test failed before it
	// ended it) holds the log's pipe: Wait does not wait for it.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("sshd said:\n%s", log.String())
		}
	})
	target := net.JoinHostPort(addr, strconv.Itoa(port))
	testutil.WaitFor(t, 10*time.Second, "sshd to accept connections on "+target, func() bool {
		select {
		case <-exited:
			t.Fatalf("sshd exited: %s", log.String())
		default:
		}
		c, err := net.DialTimeout("tcp", target, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// withoutBashrc is a command line prefix that runs a command in a mount
// namespace of its own where the user's ~/.bashrc reads as empty. sshd
// runs each session's command through the user's shell, and bash reads
// ~/.bashrc then: what a developer put there (pyenv's init took 2 s of
// every session on the dev machine) is not what the tests are about.
func withoutBashrc(t *testing.T) []string {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"unshare", "-m", "--propagation", "private", "sh", "-c",
		`[ ! -e "$1" ] || mount --bind /dev/null "$1" && shift && exec "$@"`, "sh", filepath.Join(u.HomeDir, ".bashrc")}
}

// makeNetns makes a network namespace joined to this one by a veth pair
// on a /30 of its own, removed at the end of t, and returns its name and
// the address of its end.
func makeNetns(t *testing.T) (ns, addr string, err error) {
	ns, id, err := claimNetns(t, "rdmacp-test", 1<<14)
	if err != nil {
		return "", "", err
	}
	host, peer := fmt.Sprintf("rcp%dh", id), fmt.Sprintf("rcp%dp", id)
	third, fourth := id>>6, (id&63)<<2 // a /30 in 198.18.0.0/16 (for benchmarks, unused here)
	hostAddr, peerAddr := fmt.Sprintf("198.18.%d.%d", third, fourth+1), fmt.Sprintf("198.18.%d.%d", third, fourth+2)
	for _, args := range [][]string{
		{"link", "add", host, "type", "veth", "peer", "name", peer, "netns", ns},
		{"addr", "add", hostAddr + "/30", "dev", host},
		{"link", "set", host, "up"},
		{"-n", ns, "addr", "add", peerAddr + "/30", "dev", peer},
		{"-n", ns, "link", "set", peer, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return ns, peerAddr, nil
}

// claimNetns makes a network namespace named prefix-id, for an id below n
// that no namespace on this machine has (a test running at once, in this
// process or another, holds the others), removed at the end of t. The id
// names the test's interfaces and addresses, which therefore collide with
// no other test's either.
func claimNetns(t *testing.T, prefix string, n int) (string, int, error) {
	start := rand.IntN(n)
	for i := range n {
		id := (start + i) % n
		ns := fmt.Sprintf("%s-%d", prefix, id)
		out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput()
		if err == nil {
			t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
			return ns, id, nil
		}
		if !bytes.Contains(out, []byte("exists")) {
			return "", 0, fmt.Errorf("ip netns add %s: %v: %s", ns, err, bytes.TrimSpace(out))
		}
	}
	return "", 0, fmt.Errorf("no free namespace name %s-N below %d", prefix, n)
}

func writeFile(t *testing.T, name, text string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
