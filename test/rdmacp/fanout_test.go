package rdmacp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// cluster is several hosts for a copy to all of them: an sshd each, in a
// network namespace each, all joined by a bridge (else on loopback, or on
// the harness's host address, a port each), and in a mount namespace each
// where the same path, dst, shows a directory of the host's own.
type cluster struct {
	ssh   *sshd    // its config names the hosts h1... and "down"
	names []string // h1, h2, ...
	dst   string   // the path each host sees its own directory at
	dirs  []string // each host's directory, as this process sees it
	addrs []string // each host's address; with netns, each its own
	ports []int    // each host's sshd port
	netns bool     // each host is in a network namespace of its own
	nss   []string // with netns, each host's namespace
	here  string   // with netns, this host's interface toward the hosts
}

// startCluster starts n hosts for t, stopped at the end of t.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	canRunSSHD(t)
	keys := sshKeys(t)
	c := &cluster{ssh: &sshd{}, dst: filepath.Join(t.TempDir(), "dst")}
	if err := os.Mkdir(c.dst, 0o755); err != nil {
		t.Fatal(err)
	}
	addrs, nss, here := fabric(t, n)
	c.addrs, c.netns, c.nss, c.here = addrs, nss != nil, nss, here
	var hosts strings.Builder
	for i := range n {
		name := fmt.Sprintf("h%d", i+1)
		dir := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		port := 22
		var wrap []string
		if nss != nil {
			wrap = []string{"ip", "netns", "exec", nss[i]}
		} else {
			port = testutil.FreePort(t)
		}
		// The host's own view of dst: its directory mounted there.
		wrap = append(wrap, "unshare", "-m", "--propagation", "private", "sh", "-c", `mount --bind "$1" "$2" && shift 2 && exec "$@"`, "sh", dir, c.dst)
		runSSHD(t, keys, name+"_config", wrap, addrs[i], port)
		fmt.Fprintf(&hosts, "Host %s\n  HostName %s\n  Port %d\n", name, addrs[i], port)
		c.names, c.dirs, c.ports = append(c.names, name), append(c.dirs, dir), append(c.ports, port)
	}
	c.ssh.config = filepath.Join(keys, "ssh_config")
	writeFile(t, c.ssh.config, hosts.String()+clientConfig(t, keys))
	return c
}

// fabric returns the addresses of n hosts and, where the test may make
// them, their network namespaces: each joined by a veth pair to a bridge
// in a namespace of its own, as is this one (here is its end of that
// pair), on a /24 of its own; else all on the harness's host address or on
// loopback.
func fabric(t *testing.T, n int) (addrs, nss []string, here string) {
	same := func(a string) []string {
		for range n {
			addrs = append(addrs, a)
		}
		return addrs
	}
	switch {
	case harness.host != "":
		return same(harness.host), nil, ""
	case harness.transport == "rdma":
		t.Fatal("RDMAPIPE_CP_TRANSPORT=rdma needs RDMAPIPE_CP_HOST, an address of an RDMA device")
	}
	fab, id, err := claimNetns(t, "rdmacp-fab", 256)
	if err != nil {
		t.Logf("no network namespaces (%v): the hosts on loopback", err)
		return same("127.0.0.1"), nil, ""
	}
	net := fmt.Sprintf("198.19.%d", id)
	cmds := [][]string{{"-n", fab, "link", "add", "br0", "type", "bridge"}, {"-n", fab, "link", "set", "br0", "up"}}
	for i := range n {
		ns := fmt.Sprintf("%s-h%d", fab, i+1)
		port := fmt.Sprintf("p%d", i+1)
		nss, addrs = append(nss, ns), append(addrs, fmt.Sprintf("%s.%d", net, i+1))
		cmds = append(cmds, []string{"netns", "add", ns},
			[]string{"-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", fab},
			[]string{"-n", fab, "link", "set", port, "master", "br0", "up"},
			[]string{"-n", ns, "addr", "add", addrs[i] + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"})
	}
	here = fmt.Sprintf("rcf%dh", id)
	cmds = append(cmds, []string{"link", "add", here, "type", "veth", "peer", "name", "local", "netns", fab},
		[]string{"-n", fab, "link", "set", "local", "master", "br0", "up"},
		[]string{"addr", "add", net + ".254/24", "dev", here},
		[]string{"link", "set", here, "up"})
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", here).Run()
		for _, ns := range nss {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Logf("no network namespaces (ip %s: %v: %s): the hosts on loopback", strings.Join(args, " "), err, bytes.TrimSpace(out))
			return same("127.0.0.1"), nil, ""
		}
	}
	return addrs, nss, here
}

// copyReport is rdmacp's --stats-json, the fields the tests read.
type copyReport struct {
	OK       bool  `json:"ok"`
	ExitCode int   `json:"exit_code"`
	Bytes    int64 `json:"bytes"`
	Hosts    []struct {
		Host     string `json:"host"`
		OK       bool   `json:"ok"`
		ExitCode int    `json:"exit_code"`
		Bytes    int64  `json:"bytes"`
		Error    string `json:"error"`
	} `json:"hosts"`
}

func readReport(t *testing.T, path string) copyReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("--stats-json: %v", err)
	}
	var r copyReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("--stats-json: %v: %s", err, b)
	}
	return r
}

func TestCopyTo(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	src := t.TempDir()
	data := make([]byte, 5<<20+11)
	rand.NewChaCha8([32]byte{20}).Read(data)
	writeFile(t, filepath.Join(src, "f.bin"), string(data))
	for _, name := range []string{"tree/a/b/c.txt", "tree/d.txt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(src, name), "content of "+name)
	}
	cases := []struct {
		name    string
		flags   []string
		hosts   []string
		file    bool     // name the hosts with --to-file, not --to
		src     string   // in src
		failed  []string // hosts the copy fails on
		code    int
		changed string // what each host that succeeded has, from src
	}{
		{"file", nil, c.names, false, "f.bin", nil, 0, "f.bin"},
		{"file, not encrypted", []string{"--no-encrypt"}, c.names, false, "f.bin", nil, 0, "f.bin"},
		{"tree, hosts in a file", []string{"-r"}, c.names, true, "tree", nil, 0, "tree/a/b/c.txt"},
		{"one host down", nil, []string{"h1", "down", "h3"}, false, "f.bin", []string{"down"}, 8, "f.bin"},
		{"every host down", nil, []string{"down"}, false, "f.bin", []string{"down"}, 3, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range c.dirs {
				clear(t, d)
			}
			stats := filepath.Join(t.TempDir(), "stats.json")
			args := append([]string{"-v", "--stats-json", stats}, tc.flags...)
			if tc.file {
				list := filepath.Join(t.TempDir(), "hosts")
				writeFile(t, list, "# the cluster\n"+tc.hosts[0]+"\n"+strings.Join(tc.hosts[1:], " ")+" # on one line\n")
				args = append(args, "--to-file", list)
			} else {
				args = append(args, "--to", strings.Join(tc.hosts, ","))
			}
			r := c.ssh.rdmacp(t, append(args, filepath.Join(src, tc.src), c.dst)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
			}
			rep := readReport(t, stats)
			if rep.ExitCode != tc.code || len(rep.Hosts) != len(tc.hosts) {
				t.Errorf("report: exit %d, %d hosts; want exit %d, %d hosts", rep.ExitCode, len(rep.Hosts), tc.code, len(tc.hosts))
			}
			for i, h := range rep.Hosts {
				if fail := slices.Contains(tc.failed, h.Host); h.Host != tc.hosts[i] || h.OK == fail {
					t.Errorf("report: host %d is %s, ok %v (%s); want %s, ok %v", i, h.Host, h.OK, h.Error, tc.hosts[i], !fail)
				}
			}
			for _, h := range tc.hosts {
				says := fmt.Sprintf("rdmacp: %s: in place, %d bytes written", h, rep.Bytes)
				if slices.Contains(tc.failed, h) {
					says = "rdmacp: " + h + ": "
				}
				if !strings.Contains(r.stderr, says) {
					t.Errorf("stderr does not say %q:\n%s", says, r.stderr)
				}
			}
			if tc.changed == "" {
				return
			}
			if !strings.Contains(r.stderr, fmt.Sprintf("in place on %d of %d hosts", len(tc.hosts)-len(tc.failed), len(tc.hosts))) {
				t.Errorf("no -v summary:\n%s", r.stderr)
			}
			want, err := os.ReadFile(filepath.Join(src, tc.changed))
			if err != nil {
				t.Fatal(err)
			}
			for i, name := range c.names {
				got, err := os.ReadFile(filepath.Join(c.dirs[i], tc.changed))
				switch {
				case !slices.Contains(tc.hosts, name):
					if err == nil {
						t.Errorf("%s, not in the copy, has %s", name, tc.changed)
					}
				case err != nil || !bytes.Equal(got, want):
					t.Errorf("%s has %d bytes of %s (%v), want %d identical ones", name, len(got), tc.changed, err, len(want))
				}
			}
		})
	}
	noStrays(t)
}

// clear empties directory dir.
func clear(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// remoteOf returns the process id of the remote side that host i of c
// runs (its SSH_CONNECTION names the host's sshd), or 0.
func (c *cluster) remoteOf(t *testing.T, i int) int {
	for _, p := range remotes(t, false) {
		env, err := os.ReadFile("/proc/" + p + "/environ")
		if err != nil {
			continue
		}
		for _, v := range strings.Split(string(env), "\x00") {
			if f := strings.Fields(strings.TrimPrefix(v, "SSH_CONNECTION=")); strings.HasPrefix(v, "SSH_CONNECTION=") && len(f) == 4 &&
				f[2] == c.addrs[i] && f[3] == strconv.Itoa(c.ports[i]) {
				pid, _ := strconv.Atoi(p)
				return pid
			}
		}
	}
	return 0
}

// untilPartial waits until the partial copy of name in dir has n bytes
// at least, polling every millisecond (the rest of the copy may take less
// than testutil.WaitFor's pauses); after 2 minutes it fails t with what
// rdmacp said in stderr.
func untilPartial(t *testing.T, dir, name string, n int64, stderr *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for partialSize(dir, name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not get %d bytes of the copy within 2m0s:\n%s", dir, n, stderr.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCopyToHostDies kills (or stops) the middle one of three hosts in
// the middle of a copy to all three: the first host passes the stream on
// to the third, which goes on from what it has written, so the other two
// get exact copies. Killed, the middle host then catches up from one of
// them, resuming its partial copy, and rdmacp exits 0; stopped, its old
// remote side holds that copy locked, so it fails alone and rdmacp exits
// 8 naming it.
func TestCopyToHostDies(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	size, timeout := int64(64<<20), "3s"
	if harness.host != "" {
		size = 16 << 20 // the VM's emulated devices are slow, its disk is its RAM
		// Under TCG, setting up the first host's new connection to the
		// third can starve the guest for seconds: over siw, 3 s once gave
		// up the first host, alive (its sender "silent for 3s"). The
		// engine keeps a repairing relay heard (pipe's TestRepair).
		timeout = "10s"
	}
	src := filepath.Join(t.TempDir(), "f.bin")
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{23}).Read(data)
	writeFile(t, src, string(data))
	for _, how := range []string{"killed", "stopped"} {
		t.Run(how, func(t *testing.T) {
			for _, d := range c.dirs {
				clear(t, d)
			}
			stats := filepath.Join(t.TempDir(), "stats.json")
			// At most 32 MiB/s, so that the middle host's remote side lives
			// long enough to be seen.
			cmd := c.ssh.command(t, "-v", "--timeout", timeout, "--limit-rate", "32M", "--stats-json", stats, "--to", strings.Join(c.names, ","), src, c.dst)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var middle int
			testutil.WaitFor(t, 2*time.Minute, "the middle host's remote side", func() bool { middle = c.remoteOf(t, 1); return middle != 0 })
			untilPartial(t, c.dirs[2], "f.bin", size/4, &stderr)
			// The sender waits while the middle host goes, so that it goes
			// in mid-stream.
			syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP)
			if how == "killed" {
				syscall.Kill(middle, syscall.SIGKILL)
			} else {
				syscall.Kill(middle, syscall.SIGSTOP)
				defer syscall.Kill(middle, syscall.SIGKILL)
			}
			syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
			err := cmd.Wait()
			// Killed, h2 catches up from a host that has the copy; stopped,
			// it holds its partial copy locked, and fails alone.
			code, says, exact := 8, []string{"rdmacp: h2: ", "given up in mid-stream", "not caught up: from h"}, []int{0, 2}
			if how == "killed" {
				code, says, exact = 0, []string{"h2: caught up from h"}, []int{0, 1, 2}
			}
			got := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				got = ee.ExitCode()
			}
			if got != code || err != nil && got == 0 {
				t.Fatalf("rdmacp: %v, want exit %d; stderr:\n%s", err, code, stderr.String())
			}
			rep := readReport(t, stats)
			for i, h := range rep.Hosts {
				if ok := i != 1 || code == 0; h.OK != ok {
					t.Errorf("report: %s ok %v (%s), want ok %v", h.Host, h.OK, h.Error, ok)
				}
			}
			for _, s := range says {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr does not say %q:\n%s", s, stderr.String())
				}
			}
			for _, i := range exact {
				if got, err := os.ReadFile(filepath.Join(c.dirs[i], "f.bin")); err != nil || !bytes.Equal(got, data) {
					t.Errorf("%s has %d bytes (%v), want %d identical ones", c.names[i], len(got), err, len(data))
				}
			}
			t.Logf("rdmacp said:\n%s", stderr.String())
		})
	}
	noStrays(t)
}
