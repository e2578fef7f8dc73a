package rdmacp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestBetweenTo copies from h1 down the chain h2, h3, h4 (`rdmacp
// --to h2,h3,h4 h1:SRC DST`): every host of the chain gets an exact copy,
// the stream goes from h1 straight to them (this host's interface toward
// them carries only the ssh sessions), encrypted unless --no-encrypt, and
// -v and --stats-json report each host.
func TestBetweenTo(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 4)
	const size = 24 << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{36}).Read(data)
	writeFile(t, filepath.Join(c.dirs[0], "f.bin"), string(data))
	makeTree(t, filepath.Join(c.dirs[0], "tree"))
	chain := strings.Join(c.names[1:], ",")
	cases := []struct {
		name  string
		flags []string
		src   string // on h1, under c.dst
		says  []string
		after bool // --to after SRC, as scp's getopt allows
	}{
		{"file", nil, "f.bin", []string{"encrypted (AES-256-GCM)", "sent to " + c.addrs[1] + ":", "straight down the chain, first to h2 at " + c.addrs[1] + ":"}, false},
		{"file, not encrypted", []string{"--no-encrypt"}, "f.bin", []string{"not encrypted (authenticated with aes-gmac)"}, false},
		{"tree", []string{"-r", "-p"}, "tree", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range c.dirs[1:] {
				clear(t, d)
			}
			before := linkBytes(t, c.here)
			stats := filepath.Join(t.TempDir(), "stats.json")
			args := append([]string{"-v", "--stats-json", stats}, tc.flags...)
			src := "h1:" + filepath.Join(c.dst, tc.src)
			args = append(args, "--to", chain, src, c.dst)
			if tc.after {
				args = append(args[:len(args)-4], src, "--to", chain, c.dst)
			}
			r := c.ssh.rdmacp(t, args...)
			through := linkBytes(t, c.here) - before
			if r.code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, s := range append(tc.says, "in place on 3 of 3 hosts") {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not say %q:\n%s", s, r.stderr)
				}
			}
			rep := readReport(t, stats)
			if !rep.OK || len(rep.Hosts) != 3 {
				t.Errorf("report: ok %v, %d hosts; want ok, 3", rep.OK, len(rep.Hosts))
			}
			from := filepath.Join(c.dirs[0], tc.src)
			for i, d := range c.dirs[1:] {
				if tc.src == "tree" {
					sameTree(t, from, filepath.Join(d, "tree"), func(m os.FileMode) os.FileMode { return m })
				} else {
					sameFile(t, from, filepath.Join(d, tc.src), false)
				}
				if h := rep.Hosts[i]; h.Host != c.names[i+1] || !h.OK || h.Bytes != rep.Bytes {
					t.Errorf("report: host %d is %+v, want %s in place with %d bytes", i, h, c.names[i+1], rep.Bytes)
				}
			}
			if tc.src == "f.bin" && through > size/8 {
				t.Errorf("%d bytes crossed this host's interface for a %d-byte copy from h1 to three hosts", through, size)
			}
			noStrays(t)
		})
	}
}

// TestBetweenToErrors: a host of the chain that does not start is left
// out, and the others get the copy (exit 8); a host that cannot reach the
// next one (h1 the chain's first host, or a host of the chain the next,
// in this form or the one from this host) fails the copy with exit 3
// naming the pair, before anything lands.
func TestBetweenToErrors(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 3)
	writeFile(t, filepath.Join(c.dirs[0], "f"), "ten bytes\n")
	f := "h1:" + filepath.Join(c.dst, "f")
	t.Run("one host down", func(t *testing.T) {
		r := c.ssh.rdmacp(t, "--to", "h2,down,h3", f, c.dst)
		if r.code != 8 || !strings.Contains(r.stderr, "rdmacp: down: ") {
			t.Fatalf("exit %d, want 8 naming down; stderr:\n%s", r.code, r.stderr)
		}
		for _, d := range c.dirs[1:] {
			if got, err := os.ReadFile(filepath.Join(d, "f")); err != nil || string(got) != "ten bytes\n" {
				t.Errorf("%s: %q, %v", d, got, err)
			}
		}
	})
	// Each case cuts a host of the chain off the next one (this host
	// reaches both as before): rdmacp fails with exit 3 naming the pair,
	// and no host has a file (or a partial one) it did not have before.
	g := filepath.Join(t.TempDir(), "g")
	writeFile(t, g, "local bytes\n")
	for _, tc := range []struct {
		name     string
		from, to int // the hosts cut off, as indices of c
		args     []string
	}{
		{"h1 cannot reach h2", 0, 1, []string{"--to", "h2,h3", f, c.dst}},
		{"h2 cannot reach h3", 1, 2, []string{"--to", "h2,h3", f, c.dst}},
		{"this host down h1, h2, h3: h2 cannot reach h3", 1, 2, []string{"--to", "h1,h2,h3", g, c.dst}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range c.dirs[1:] {
				clear(t, d)
			}
			cutOff(t, c, tc.from, tc.to)
			r := c.ssh.rdmacp(t, tc.args...)
			t.Logf("rdmacp said:\n%s", r.stderr)
			says := fmt.Sprintf("h%d cannot connect to h%d at %s:", tc.from+1, tc.to+1, c.addrs[tc.to])
			if r.code != 3 || !strings.Contains(r.stderr, says) {
				t.Fatalf("exit %d, want 3 saying %q; stderr:\n%s", r.code, says, r.stderr)
			}
			for i, d := range c.dirs {
				want := 0
				if i == 0 {
					want = 1 // f, the source
				}
				if entries, _ := os.ReadDir(d); len(entries) != want {
					t.Errorf("%s has %v after a failed copy", d, entries)
				}
			}
			noStrays(t)
		})
	}
}

// cutOff leaves host from of c without a route to host to until the end
// of t; this host reaches both as before.
func cutOff(t *testing.T, c *cluster, from, to int) {
	t.Helper()
	route := []string{"-n", c.nss[from], "route", "add", "unreachable", c.addrs[to] + "/32"}
	if out, err := exec.Command("ip", route...).CombinedOutput(); err != nil {
		t.Fatalf("ip route add: %v: %s", err, out)
	}
	t.Cleanup(func() {
		route[3] = "del"
		if out, err := exec.Command("ip", route...).CombinedOutput(); err != nil {
			t.Errorf("ip route del: %v: %s", err, out)
		}
	})
}

// TestBetweenToHostDies kills the first host of the chain h2, h3 in the
// middle of a copy from h1: h1 gives it up and goes on with h3 and names
// it lost; h2 then catches up from h3's copy, and rdmacp exits 0 with
// both copies exact.
func TestBetweenToHostDies(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 3)
	const size = 64 << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{37}).Read(data)
	writeFile(t, filepath.Join(c.dirs[0], "f.bin"), string(data))
	stats := filepath.Join(t.TempDir(), "stats.json")
	cmd := c.ssh.command(t, "-v", "--timeout", "3s", "--limit-rate", "32M", "--stats-json", stats, "--to", "h2,h3", "h1:"+filepath.Join(c.dst, "f.bin"), c.dst)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// h1's remote side, the sender, is held while h2's is looked for (a
	// look takes a pgrep, longer than the rest of a copy on an idle
	// machine), then let go until h3 has a quarter of the file. It is
	// held only once rdmacp starts the chain's ssh logins, which it does
	// after h1's plan: held before that, h1 would keep the chain from
	// starting. The copy goes at most 32 MiB/s, so that h1's remote side
	// lives long enough to be seen on a loaded machine.
	var sender, first int
	testutil.WaitFor(t, 2*time.Minute, "the remote side on h1", func() bool {
		sender = c.remoteOf(t, 0)
		return sender != 0
	})
	t.Cleanup(func() { // a failed test leaves none stopped
		if t.Failed() {
			syscall.Kill(sender, syscall.SIGCONT)
		}
	})
	testutil.WaitFor(t, 2*time.Minute, "the chain's ssh logins", func() bool {
		return len(ours(t, "^ssh .*--remote-receive")) > 0
	})
	syscall.Kill(sender, syscall.SIGSTOP)
	testutil.WaitFor(t, 2*time.Minute, "the remote side on h2", func() bool {
		first = c.remoteOf(t, 1)
		return first != 0
	})
	syscall.Kill(sender, syscall.SIGCONT)
	untilPartial(t, c.dirs[2], "f.bin", size/4, &stderr)
	// The sender waits while h2 goes, so that it goes in mid-stream.
	syscall.Kill(sender, syscall.SIGSTOP)
	syscall.Kill(first, syscall.SIGKILL)
	syscall.Kill(sender, syscall.SIGCONT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rdmacp: %v, want exit 0 (h2 caught up); stderr:\n%s", err, stderr.String())
	}
	rep := readReport(t, stats)
	if len(rep.Hosts) != 2 || !rep.Hosts[0].OK || !rep.Hosts[1].OK {
		t.Errorf("report: %+v, want h2 caught up and h3 in place", rep.Hosts)
	}
	if !strings.Contains(stderr.String(), "rdmacp: h2: caught up from h3") {
		t.Errorf("stderr does not say that h2 caught up from h3:\n%s", stderr.String())
	}
	for _, i := range []int{1, 2} {
		if got, err := os.ReadFile(filepath.Join(c.dirs[i], "f.bin")); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s has %d bytes (%v), want %d identical ones", c.names[i], len(got), err, len(data))
		}
	}
	t.Logf("rdmacp said:\n%s", stderr.String())
	noStrays(t)
}

// TestHostileBetweenTo copies from a hostile h1 down the chain h2, h3: a
// plan of what was not asked for is refused with exit 9 before the chain
// starts; lost hosts that are not the chain's or more of them than it
// has fail the copy with exit 5 before anything is put in place, and a
// byte count that is not what the hosts got fails it with exit 5 too; a
// setup failure that is not one to connect to h2 (another version, or
// an address h1 was never given) is h1's own, exit 3, and says nothing
// of h1 not reaching h2 (see hostileChain).
func TestHostileBetweenTo(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 3)
	writeFile(t, filepath.Join(c.dirs[0], "report.txt"), "hello")
	cases := []struct {
		cmd  string
		code int
		says string
	}{
		{hostileCmd(t, "file-bashrc"), 9, `the remote side on h1 sent what was not asked for: ".bashrc"`},
		{chainCmd(t, "lost-elsewhere"), 5, `names "10.9.9.9:1", which is none of the hosts of this copy`},
		{chainCmd(t, "lost-all"), 5, "names more lost hosts than the 2 of the chain"},
		{chainCmd(t, "count"), 5, "reports ok 5, 6 bytes were sent"},
		{chainCmd(t, "version"), 3, `remote side on h1: "handshake: unexpected message from the receiver`},
		{chainCmd(t, "unreached-elsewhere"), 3, `remote side on h1: "cannot connect to 10.9.9.9:1: no route to host"`},
	}
	for _, tc := range cases {
		name := tc.cmd[strings.LastIndex(tc.cmd, " ")+1:]
		t.Run(name, func(t *testing.T) {
			for _, d := range c.dirs[1:] {
				clear(t, d)
			}
			r := c.ssh.rdmacp(t, "--remote-cmd", tc.cmd, "--timeout", "10s", "--to", "h2,h3", "h1:report.txt", c.dst)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) || strings.Contains(r.stderr, "no upload lie") || strings.Contains(r.stderr, "h1 cannot connect") {
				t.Errorf("exit %d, want %d saying %s; stderr:\n%s", r.code, tc.code, tc.says, r.stderr)
			}
			for _, d := range c.dirs[1:] {
				if _, err := os.Stat(filepath.Join(d, "report.txt")); err == nil && name != "count" {
					t.Errorf("%s has report.txt in place", d)
				}
			}
		})
	}
	noStrays(t)
}

// chainCmd is the --remote-cmd that starts, as the sending side, the
// hostile sender of a chain with lie (see hostileChain), and, as a
// receiving side, the real rdmacp.
func chainCmd(t *testing.T, lie string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s %s %s %s", self, hostileChainFlag, bin, lie)
}

// TestBetweenTransport copies a file from h1 to h2, and from h1 down the
// chain h2, h3, over the harness's transport (rdma in the SoftRoCE VM,
// where the hosts share one address, so that TestBetween's measure of
// this host's interface does not apply): h1 says it sent the stream over
// that transport to the address and port that h2 says it listens on, and
// this side says h1 streams there; the copies are exact, and the RDMA
// device, when named, carried at least a packet per 4 KiB of each.
func TestBetweenTransport(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	const size = 3 << 20
	f := filepath.Join(c.dst, "f")
	makeFile(t, filepath.Join(c.dirs[0], "f"), size, false)
	sent := regexp.MustCompile(`\nrdmacp: sent to (\S+): (\d+) bytes in .* over (\w+),`)
	cases := []struct {
		name  string
		args  []string
		to    []int  // the hosts that get the copy
		local string // what this side says of where h1 streams
	}{
		{"between", []string{"h1:" + f, "h2:" + c.dst + "/"}, []int{1}, "from h1 straight to h2 at "},
		{"down a chain", []string{"--to", "h2,h3", "h1:" + f, c.dst}, []int{1, 2}, "straight down the chain, first to h2 at "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range c.dirs[1:] {
				clear(t, d)
			}
			before := counters(t)
			r := c.ssh.rdmacp(t, append([]string{"-v"}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			t.Logf("rdmacp said:\n%s", r.stderr)
			m := sent.FindStringSubmatch("\n" + r.stderr)
			switch {
			case m == nil || m[2] != strconv.Itoa(size) || m[3] != harness.transport:
				t.Errorf("h1 does not say it sent %d bytes over %s", size, harness.transport)
			case !strings.Contains(r.stderr, "listening on "+m[1]+" (") || !strings.Contains(r.stderr, tc.local+m[1]+"\n"):
				t.Errorf("h2 does not say it listens on %s, where h1 sent, or this side that h1 streams there", m[1])
			}
			for _, i := range tc.to {
				sameFile(t, filepath.Join(c.dirs[0], "f"), filepath.Join(c.dirs[i], "f"), false)
			}
			if harness.device == "" {
				return
			}
			after := counters(t)
			for i, name := range []string{"sent_pkts", "rcvd_pkts"} {
				if d := after[i] - before[i]; d < int64(len(tc.to))*size/4096 {
					t.Errorf("%s's %s grew by %d during the copy, want %d at least", harness.device, name, d, len(tc.to)*size/4096)
				}
			}
		})
	}
	noStrays(t)
}
