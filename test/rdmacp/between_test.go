package rdmacp

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// betweenCluster starts n hosts for a copy between them, each in a
// network namespace of its own, so that the bytes on this host's
// interface toward them tell whether a stream passed through here.
func betweenCluster(t *testing.T, n int) *cluster {
	t.Helper()
	if harness.host != "" {
		t.Skip("copies between two hosts are tested on the host: in the VM the hosts share one address")
	}
	c := startCluster(t, n)
	if !c.netns {
		testutil.Unmet(t, "no network namespaces: the hosts share one address with this one")
	}
	return c
}

// linkBytes returns the bytes received and sent on this host's interface
// name.
func linkBytes(t *testing.T, name string) int64 {
	t.Helper()
	var sum int64
	for _, dir := range []string{"rx_bytes", "tx_bytes"} {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "statistics", dir))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += n
	}
	return sum
}

// TestBetween copies from h1 to h2 (`rdmacp h1:SRC h2:DST`): the copy is
// exact, the stream goes from h1 straight to h2 (this host's interface
// toward them carries only the ssh sessions, where a download of the same
// file carries all of it), and it is encrypted unless --no-encrypt.
func TestBetween(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 2)
	const size = 24 << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{35}).Read(data)
	writeFile(t, filepath.Join(c.dirs[0], "f.bin"), string(data))
	if err := os.Chmod(filepath.Join(c.dirs[0], "f.bin"), 0o640); err != nil {
		t.Fatal(err)
	}
	makeTree(t, filepath.Join(c.dirs[0], "tree"))
	cases := []struct {
		name  string
		flags []string
		src   string // on h1, under c.dst
		dst   string // on h2, under c.dst
		got   string // where the copy lands, under h2's directory
		says  []string
	}{
		{"file into a directory", []string{"-v"}, "f.bin", "", "f.bin", []string{"encrypted (AES-256-GCM)", "sent to " + c.addrs[1] + ":", "listening on " + c.addrs[1] + ":", "straight to h2"}},
		{"file to a new name, -p", []string{"-v", "-p"}, "f.bin", "g.bin", "g.bin", []string{"encrypted (AES-256-GCM)"}},
		{"not encrypted", []string{"-v", "--no-encrypt"}, "f.bin", "", "f.bin", []string{"not encrypted (authenticated with aes-gmac)"}},
		{"tree to a new name", []string{"-r", "-p"}, "tree", "copy", "copy", nil},
		{"tree into a directory", []string{"-r", "-p"}, "tree", "", "tree", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clear(t, c.dirs[1])
			before := linkBytes(t, c.here)
			args := append(tc.flags, "h1:"+filepath.Join(c.dst, tc.src), "h2:"+filepath.Join(c.dst, tc.dst)+"/")
			if tc.dst != "" {
				args[len(args)-1] = strings.TrimSuffix(args[len(args)-1], "/")
			}
			r := c.ssh.rdmacp(t, args...)
			if r.code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, s := range tc.says {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not say %q:\n%s", s, r.stderr)
				}
			}
			from, got := filepath.Join(c.dirs[0], tc.src), filepath.Join(c.dirs[1], tc.got)
			if tc.src == "tree" {
				sameTree(t, from, got, func(m os.FileMode) os.FileMode { return m })
			} else {
				sameFile(t, from, got, strings.Contains(strings.Join(tc.flags, " "), "-p"))
			}
			if through := linkBytes(t, c.here) - before; tc.src == "f.bin" && through > size/8 {
				t.Errorf("%d bytes crossed this host's interface for a %d-byte copy between two hosts", through, size)
			}
			noStrays(t)
		})
	}
	// The measure itself: a download of the file crosses that interface.
	before := linkBytes(t, c.here)
	if r := c.ssh.rdmacp(t, "h1:"+filepath.Join(c.dst, "f.bin"), t.TempDir()); r.code != 0 {
		t.Fatalf("download: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if through := linkBytes(t, c.here) - before; through < size {
		t.Fatalf("a download of %d bytes: %d bytes on this host's interface toward the hosts", size, through)
	}
}

// sameFile fails t unless got has want's bytes, and, with preserve, its
// mode and modification time.
func sameFile(t *testing.T, want, got string, preserve bool) {
	t.Helper()
	if hashFile(t, want) != hashFile(t, got) {
		t.Fatalf("%s: content differs from %s", got, want)
	}
	wi, err := os.Stat(want)
	if err != nil {
		t.Fatal(err)
	}
	gi, err := os.Stat(got)
	if err != nil {
		t.Fatal(err)
	}
	if preserve && (gi.Mode() != wi.Mode() || !gi.ModTime().Equal(wi.ModTime())) {
		t.Errorf("-p: %v %v, want %v %v", gi.Mode(), gi.ModTime(), wi.Mode(), wi.ModTime())
	}
	noLeftovers(t, filepath.Dir(got), filepath.Base(got))
}

// TestBetweenErrors: a copy between two hosts fails with the exit code a
// copy to or from one host has for the same cause, and, when the first
// host cannot reach the second, names the pair.
func TestBetweenErrors(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 2)
	writeFile(t, filepath.Join(c.dirs[0], "f"), "ten bytes\n")
	// An address of h2 that h1 has no route to.
	hidden := fmt.Sprintf("10.%d.%d.1", rand.IntN(256), rand.IntN(256))
	if out, err := exec.Command("ip", "-n", c.nss[1], "addr", "add", hidden+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip addr add: %v: %s", err, out)
	}
	f := "h1:" + filepath.Join(c.dst, "f")
	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"source missing", []string{f + "-missing", "h2:" + c.dst}, 2, "no such file"},
		{"destination not writable", []string{f, "h2:/sys/"}, 3, `remote side on h2: "open /sys/.f.rdmacp-`},
		{"destination directory missing", []string{f, "h2:/nonexistent/dir/f"}, 3, "/nonexistent/dir does not exist"},
		{"second host down", []string{f, "down:/tmp/"}, 3, "start the remote side on down over ssh"},
		{"first host down", []string{"down:/tmp/f", "h2:/tmp/"}, 3, "start the remote side on down over ssh"},
		{"no route between them", []string{"--data-host", hidden, f, "h2:" + c.dst}, 3, "h1 cannot connect to h2 at " + hidden + ":"},
		{"relayed from a remote host, resuming", []string{"-C", "--to", "h2", f, c.dst}, 2, "do not go with --resume"},
		{"relayed from two hosts", []string{"--to", "h2", f, "h2:" + filepath.Join(c.dst, "f"), c.dst}, 2, "are on different hosts"},
		{"sources here and there", []string{f, "./f", "h2:" + c.dst}, 2, "every source must be [user@]HOST:SRC"},
		{"a source there among those here", []string{"./f", f, "h2:" + c.dst}, 2, "all on this host or all on one remote host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clear(t, c.dirs[1])
			r := c.ssh.rdmacp(t, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("exit %d, want %d with %q; stderr:\n%s", r.code, tc.code, tc.says, r.stderr)
			}
			if entries, _ := os.ReadDir(c.dirs[1]); len(entries) != 0 {
				t.Errorf("h2 has %v after a failed copy", entries)
			}
			noStrays(t)
		})
	}
}

// TestBetweenLiteral copies names with wildcard characters from h1 to h2
// as a download does (see TestRemoteLiteral): g[1], which its pattern
// does not match, by its literal name into a directory and to a new name,
// and h1:'one/g*', one match, to a new name, which it becomes.
func TestBetweenLiteral(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 2)
	if err := os.Mkdir(filepath.Join(c.dirs[0], "one"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"g[1]", "one/g1", "one/h"} {
		writeFile(t, filepath.Join(c.dirs[0], n), n+"\n")
	}
	for _, tc := range []struct{ src, dst, got, want string }{
		{"g[1]", "", "g[1]", "g[1]"},
		{"g[1]", "new", "new", "g[1]"},
		{"one/g*", "new", "new", "one/g1"},
	} {
		t.Run(tc.src+" to "+cmp.Or(tc.dst, "a directory"), func(t *testing.T) {
			clear(t, c.dirs[1])
			r := c.ssh.rdmacp(t, "h1:"+filepath.Join(c.dst, tc.src), "h2:"+filepath.Join(c.dst, tc.dst))
			if r.code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			if b, err := os.ReadFile(filepath.Join(c.dirs[1], tc.got)); err != nil || string(b) != tc.want+"\n" {
				t.Fatalf("h2's %s holds %q (%v), want a copy of %s", tc.got, b, err, tc.want)
			}
			noStrays(t)
		})
	}
}

// TestHostileBetween copies from a hostile h1 (see hostileMain) to h2:
// a plan of what was not asked for is refused with exit 9 quoting h1's
// claim, before anything starts on h2 (whose remote command, the hostile
// one too, would say "no upload lie"), and nothing lands there.
func TestHostileBetween(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 2)
	cases := []struct {
		lie   string
		args  []string // before the source and DST
		src   string
		claim string // as quoted
	}{
		{"file-bashrc", nil, "report.txt", `".bashrc"`},
		{"archive-keys", nil, "report.txt", `"an archive of report.txt"`},
		{"archive-ssh", []string{"-r"}, "dir", `".ssh"`},
		{"archive-ssh", []string{"-r"}, ".", `".ssh"`},
		{"glob-bashrc", nil, "dir/*.txt", `".bashrc"`},
		{"literal-bashrc", nil, "dir/g[1]", `".bashrc"`},
		{"literal-file", nil, "dir/g[1]", `"g[2]"`},
	}
	for _, tc := range cases {
		t.Run(tc.lie+" for "+tc.src, func(t *testing.T) {
			clear(t, c.dirs[1])
			args := append([]string{"--remote-cmd", hostileCmd(t, tc.lie)}, tc.args...)
			r := c.ssh.rdmacp(t, append(args, "h1:"+tc.src, "h2:"+c.dst)...)
			says := "the remote side on h1 sent what was not asked for: " + tc.claim
			if r.code != 9 || !strings.Contains(r.stderr, says) || strings.Contains(r.stderr, "no upload lie") {
				t.Errorf("exit %d, want 9 saying %s, h2 not started; stderr:\n%s", r.code, says, r.stderr)
			}
			if entries, _ := os.ReadDir(c.dirs[1]); len(entries) != 0 {
				t.Errorf("h2 has %v", entries)
			}
		})
	}
}

// TestHostileBetweenWithoutR copies h1:* without -r from a hostile h1 (see
// hostileMain) to the real rdmacp on h2, into a DST with a bin/
// directory: h1 answers with the name bin, which the pattern matches, and
// an archive of bin/planted, or of bin/ and bin/planted. h2 refuses the
// entry (exit 9, quoting it) and nothing lands in bin/. An honest h1 with
// a file and a directory that the pattern matches sends the file, leaves
// the directory out and names it (exit 1, as scp).
func TestHostileBetweenWithoutR(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 2)
	bin := filepath.Join(c.dirs[1], "bin")
	for _, lie := range []string{"glob-bin", "glob-bin-dir"} {
		t.Run(lie, func(t *testing.T) {
			clear(t, c.dirs[1])
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			r := c.ssh.rdmacp(t, "--remote-cmd", hostileBetweenCmd(t, lie), "h1:*", "h2:"+c.dst+"/")
			says := "the remote side on h1 sent what was not asked for: \"bin/"
			if r.code != 9 || !strings.Contains(r.stderr, says) || !strings.Contains(r.stderr, "without -r") {
				t.Errorf("exit %d, want 9 saying %s...without -r; stderr:\n%s", r.code, says, r.stderr)
			}
			if entries, _ := os.ReadDir(bin); len(entries) != 0 {
				t.Errorf("h2's bin has %v", entries)
			}
		})
	}
	t.Run("honest", func(t *testing.T) {
		clear(t, c.dirs[1])
		src := filepath.Join(c.dirs[0], "src")
		if err := os.MkdirAll(filepath.Join(src, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(src, "bin", "f"), "in bin\n")
		writeFile(t, filepath.Join(src, "a"), "a\n")
		r := c.ssh.rdmacp(t, "h1:"+filepath.Join(c.dst, "src", "*"), "h2:"+c.dst+"/")
		if r.code != 1 || !strings.Contains(r.stderr, filepath.Join(c.dst, "src", "bin")+" is a directory") {
			t.Errorf("exit %d, want 1 naming bin as a directory; stderr:\n%s", r.code, r.stderr)
		}
		got := snapshot(t, c.dirs[1])
		if want := map[string]string{".": got["."], "a": snapshot(t, src)["a"]}; !maps.Equal(got, want) {
			t.Errorf("h2 has %q, want %q", got, want)
		}
	})
}

// TestBetweenResume resumes copies between two hosts with -C: a file
// whose upload to h2 was interrupted half-way (a partial copy there of
// the same version of the file, which h1 has), and a tree that h2 has
// whole but for one file that grew on h1. Each arrives exact, and h1's
// summary says what the partial copies spared.
func TestBetweenResume(t *testing.T) {
	t.Parallel()
	c := betweenCluster(t, 2)
	const size = 64 << 20
	big := filepath.Join(c.dirs[0], "big")
	makeFile(t, big, size, false)
	// Paced, so that half of it arrives in a second, not before a poll.
	cmd := c.ssh.command(t, append(window, "--limit-rate", "32M", big, "h2:"+c.dst+"/")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	interrupt(t, cmd, false, "interrupt", func() bool { return partialSize(c.dirs[1], "big") >= size/2 })
	if err := cmd.Wait(); err == nil {
		t.Fatal("the interrupted upload succeeded")
	}
	noStrays(t)
	r := c.ssh.rdmacp(t, "-C", "-v", "h1:"+filepath.Join(c.dst, "big"), "h2:"+c.dst+"/")
	if r.code != 0 {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	sameFile(t, big, filepath.Join(c.dirs[1], "big"), false)
	kept, sent := resumed(t, r.stderr)
	t.Logf("the file resumed: %d bytes kept, %d sent", kept, sent)
	if kept < size/2 || kept+sent != size {
		t.Fatalf("%d kept and %d sent of %d bytes, want at least half kept", kept, sent, size)
	}
	noStrays(t)

	tree := filepath.Join(c.dirs[0], "tree")
	makeTree(t, tree)
	makeFile(t, filepath.Join(tree, "grows"), 8<<20, false)
	args := []string{"-r", "-p", "h1:" + filepath.Join(c.dst, "tree"), "h2:" + c.dst}
	if r := c.ssh.rdmacp(t, args...); r.code != 0 {
		t.Fatalf("the first copy: exit %d: %s", r.code, r.stderr)
	}
	f, err := os.OpenFile(filepath.Join(tree, "grows"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 1<<20))
	f.Close()
	r = c.ssh.rdmacp(t, append([]string{"-C", "-v"}, args...)...)
	if r.code != 0 {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	sameTree(t, tree, filepath.Join(c.dirs[1], "tree"), func(m os.FileMode) os.FileMode { return m })
	kept, sent = resumed(t, r.stderr)
	t.Logf("the tree resumed: %d bytes kept, %d sent", kept, sent)
	if kept < 8<<20 || sent > 2<<20 {
		t.Fatalf("%d kept and %d sent, want the 8 MiB in place kept and little more than the MiB that grew sent", kept, sent)
	}
	noStrays(t)
}
