package rdmacp

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
	"github.com/rdmapipe/rdmapipe/pipe/transport/tcp"
)

// A hostile remote rdmacp: this test binary, started by the tests' sshd as
// the remote command (`rdmacp.test hostile LIE --remote-send`, see
// hostileCmd), speaks the remote side's protocol with lies, written here
// by hand (the status lines of internal/cp/proto/status.go, the stream through
// package pipe), so that the real rdmacp on the local side must catch
// them. It prints every offer the local side sends it ("hostile read:
// LINE") on stderr, which ssh passes on to the local rdmacp's: what a
// resume offered shows there.

// hostileRequest is what the hostile remote reads of the request line.
type hostileRequest struct {
	Key       string   `json:"key"`
	Send      []string `json:"send"`
	Connect   string   `json:"connect"`
	Transport string   `json:"transport"`
	Encrypt   bool     `json:"encrypt"`
}

// hostileKey is the line of the key the hostile remote plants.
const hostileKey = "ssh-ed25519 AAAAhostile attacker@evil\n"

// lies are what the hostile remote says and sends, by name: its plan (the
// JSON of internal/cp/proto's Contents), whether it reads a resume's offers
// first, and the stream.
var lies = map[string]struct {
	plan   string
	offers bool
	stream []byte
}{
	// A file under a name of its choosing.
	"file-bashrc": {plan: `{"mode":"file","name":".bashrc","perm":420,"size":5}`, stream: []byte("evil\n")},
	// An archive for one file asked for without -r, planting a key.
	"archive-keys": {plan: `{"mode":"tar","single":true,"names":["report.txt"]}`, stream: keys},
	// A pattern answered with a name it does not match.
	"glob-bashrc": {plan: `{"mode":"tar","names":["a.txt",".bashrc"],"counts":[2]}`, stream: hostileArchive(hostileEntry{name: "a.txt", body: "ok"}, hostileEntry{name: ".bashrc", body: "evil\n"})},
	// A literal name asked for (a pattern that matches nothing there),
	// answered with that name and another that is neither a match nor it.
	"literal-bashrc": {plan: `{"mode":"tar","names":["g[1]",".bashrc"],"counts":[2]}`, stream: hostileArchive(hostileEntry{name: "g[1]", body: "ok"}, hostileEntry{name: ".bashrc", body: "evil\n"})},
	// A literal name asked for, answered with a file of another name.
	"literal-file": {plan: `{"mode":"file","name":"g[2]","perm":420,"size":5}`, stream: []byte("evil\n")},
	// An archive whose top-level name is not the one asked for.
	"archive-ssh": {plan: `{"mode":"tar","single":true,"names":[".ssh"]}`, stream: keys},
	// The name asked for in the plan, an entry outside it in the archive.
	"archive-outside": {plan: `{"mode":"tar","single":true,"names":["dir"]}`, stream: hostileArchive(hostileEntry{name: "dir", body: "ok"}, sshDir, key)},
	// A resume of a tree named .ssh: the offers of what is there, then a
	// key appended to authorized_keys, "resumed" at its full size.
	"resume-ssh": {plan: `{"mode":"tar","single":true,"names":[".ssh"]}`, offers: true, stream: hostileArchive(sshDir, resumedKey(".ssh/authorized_keys"))},
	// A resume of the tree asked for, dir, which is a link to .ssh here:
	// the same through the link.
	"resume-link": {plan: `{"mode":"tar","single":true,"names":["dir"]}`, offers: true, stream: hostileArchive(resumedKey("dir/authorized_keys"))},
	// The tree asked for, dir, which is a link to .ssh here, without its
	// directory entry: a key written through the link.
	"archive-link": {plan: `{"mode":"tar","single":true,"names":["dir"]}`, stream: hostileArchive(hostileEntry{name: "dir/authorized_keys", body: hostileKey})},
	// A pattern without -r answered with a name it matches, bin, and a
	// file planted in the directory of that name here; or with bin's
	// directory entry first.
	"glob-bin":     {plan: `{"mode":"tar","names":["bin"],"counts":[1]}`, stream: hostileArchive(planted)},
	"glob-bin-dir": {plan: `{"mode":"tar","names":["bin"],"counts":[1]}`, stream: hostileArchive(hostileEntry{name: "bin/", dir: true}, planted)},
	// The tree asked for with -H, dir, as a hard link to the
	// authorized_keys that is here.
	"hardlink-keys": {plan: `{"mode":"tar","single":true,"names":["dir"]}`, stream: hostileArchive(hostileEntry{name: "dir", link: ".ssh/authorized_keys"})},
}

// ownKey is what DST/.ssh/authorized_keys holds before the hostile remote
// tries to plant its key (see hostileHome).
const ownKey = "ssh-ed25519 AAAAmine me@here\n"

// hostileEntry is an entry of a hostile archive: a directory, a hard
// link to link, or a file with body, resuming a file at the byte at if at
// is set.
type hostileEntry struct {
	name, body, at, link string
	dir                  bool
}

var (
	sshDir  = hostileEntry{name: ".ssh/", dir: true}
	planted = hostileEntry{name: "bin/planted", body: "#!/bin/sh\necho evil\n"}
	key     = hostileEntry{name: ".ssh/authorized_keys", body: hostileKey}
	keys    = hostileArchive(sshDir, key)
)

// resumedKey is the entry that appends hostileKey to ownKey at name.
func resumedKey(name string) hostileEntry {
	return hostileEntry{name: name, body: hostileKey, at: strconv.Itoa(len(ownKey))}
}

// hostileArchive returns a tar archive of entries.
func hostileArchive(entries ...hostileEntry) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(e.body)), ModTime: time.Now(), Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Mode = tar.TypeDir, 0o700
		}
		if e.link != "" {
			h.Typeflag, h.Linkname = tar.TypeLink, e.link
		}
		if e.at != "" {
			h.PAXRecords = map[string]string{"RDMACP.resume": e.at}
		}
		tw.WriteHeader(h)
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return b.Bytes()
}

// hostileMain runs the hostile remote with args: the lie's name, then
// the real rdmacp to run as a receiving side, if any (see
// hostileBetweenCmd), then the flag that starts the remote side
// (--remote-send or --remote-receive). It returns the exit code.
func hostileMain(args []string) int {
	if len(args) == 3 && args[2] == "--remote-receive" {
		return execRdmacp(args[1], args[2])
	}
	if len(args) == 3 {
		args = []string{args[0], args[2]}
	}
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "hostile: want LIE, [RDMACP] and the remote side's flag, got %q\n", args)
		return 2
	}
	br := bufio.NewReader(os.Stdin)
	line, err := br.ReadString('\n')
	var req hostileRequest
	if err == nil {
		err = json.Unmarshal([]byte(line), &req)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostile: read the request: %v\n", err)
		return 1
	}
	if args[1] == "--remote-receive" {
		return hostileOffer(args[0], br)
	}
	lie, ok := lies[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "hostile: no lie %q\n", args[0])
		return 2
	}
	fmt.Printf("RDMACP plan %s\n", lie.plan)
	if lie.offers && !readOffers(br) {
		return 1
	}
	n, err := hostileStream(req, lie.stream, br)
	if err != nil {
		fmt.Printf("RDMACP fail 4 %q\n", "hostile: "+err.Error())
		return 4
	}
	fmt.Printf("RDMACP ok %d\n", n)
	return 0
}

// readOffers reads the local side's offers up to their end, printing
// each but the end on stderr, and says whether the end came.
func readOffers(br *bufio.Reader) bool {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			fmt.Fprintf(os.Stderr, "hostile: no end of the offers: %v\n", err)
			return false
		}
		if strings.Contains(line, `"end":true`) {
			return true
		}
		fmt.Fprintf(os.Stderr, "hostile read: %s", line)
	}
}

// hostileStream streams data to the local side as the request says (or,
// in a copy between two hosts, to the receiving host that the connect
// line names), until stdin, the rest of which br holds, ends (as the real
// remote side does: the local side closes it when it gives up).
func hostileStream(req hostileRequest, data []byte, br *bufio.Reader) (int64, error) {
	key, err := hex.DecodeString(req.Key)
	if err != nil {
		return 0, err
	}
	if req.Connect == "" {
		var c struct {
			Connect string `json:"connect"`
		}
		line, err := br.ReadString('\n')
		if err != nil || json.Unmarshal([]byte(line), &c) != nil {
			return 0, fmt.Errorf("read the connect line %q: %v", line, err)
		}
		req.Connect = c.Connect
	}
	var d conn.Dialer = tcp.Dialer{}
	if req.Transport == "rdma" {
		d = rdma.Dialer{Options: rdma.Options{GIDIndex: -1}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		io.Copy(io.Discard, br)
		cancel()
	}()
	c, err := d.Dial(ctx, req.Connect, conn.NewParams(conn.DefaultChunk, conn.DefaultDepth))
	if err != nil {
		return 0, err
	}
	st, err := pipe.Send(ctx, c, bytes.NewReader(data), pipe.SendConfig{Key: key, Encrypt: req.Encrypt})
	pipe.Release(c, err)
	return st.Bytes, err
}

// hostileOffer is a hostile upload destination resuming: it offers one
// block of 2^47 bytes (one hash of zeros), prints where the local side
// answers that the stream starts, and, for lie "two-offers", offers
// again; then it fails.
func hostileOffer(lie string, br *bufio.Reader) int {
	if lie != "huge-block" && lie != "two-offers" {
		fmt.Fprintf(os.Stderr, "hostile: no upload lie %q\n", lie)
		return 2
	}
	have := fmt.Sprintf("RDMACP have {\"block\":%d,\"size\":%d,\"hashes\":[%q]}\n", int64(1)<<47, int64(1)<<47, strings.Repeat("00", 16))
	fmt.Print(have)
	line, err := br.ReadString('\n')
	if err != nil && err != io.EOF {
		return 1
	}
	fmt.Fprintf(os.Stderr, "hostile read: %s\n", strings.TrimSpace(line))
	if lie == "two-offers" {
		fmt.Print(have)
		br.ReadString('\n')
	}
	fmt.Printf("RDMACP fail 4 %q\n", "hostile: no stream after the offer")
	return 4
}

// hostileChainFlag starts this test binary as the hostile sending side of
// a copy from a remote host down a chain (see chainCmd).
const hostileChainFlag = "hostile-chain"

// hostileChain runs, with args the real rdmacp, the lie's name and the
// remote side's flag, the real rdmacp's receiving side, or a sending side
// that plans the 5 bytes of report.txt honestly, reads the forward line
// and lies: "lost-elsewhere" names a lost host of no chain, "lost-all"
// names the chain's first host more times than the chain has hosts,
// "count" streams the 5 bytes to the first host but says it sent 6,
// "version" fails as a sending side of another version, and
// "unreached-elsewhere" says it could not connect to an address it was
// never given.
func hostileChain(args []string) int {
	if len(args) != 3 {
		fmt.Fprintf(os.Stderr, "hostile: want rdmacp, LIE and the remote side's flag, got %q\n", args)
		return 2
	}
	if args[2] == "--remote-receive" {
		return execRdmacp(args[0], args[2])
	}
	br := bufio.NewReader(os.Stdin)
	var req hostileRequest
	var f struct {
		To   string            `json:"to"`
		Key  string            `json:"key"`
		Then []json.RawMessage `json:"then"`
	}
	if line, err := br.ReadString('\n'); err != nil || json.Unmarshal([]byte(line), &req) != nil {
		fmt.Fprintf(os.Stderr, "hostile: read the request: %v\n", err)
		return 1
	}
	fmt.Println(`RDMACP plan {"mode":"file","name":"report.txt","perm":420,"size":5}`)
	if line, err := br.ReadString('\n'); err != nil || json.Unmarshal([]byte(line), &f) != nil {
		fmt.Fprintf(os.Stderr, "hostile: read the forward line: %v\n", err)
		return 1
	}
	switch args[1] {
	case "lost-elsewhere":
		fmt.Println(`RDMACP lost "10.9.9.9:1"`)
	case "version":
		fmt.Printf("RDMACP fail 3 %q\n", "handshake: unexpected message from the receiver: is it an rdmapipe receiver of the same version?")
		return 3
	case "unreached-elsewhere":
		fmt.Printf("RDMACP fail 3 %q\n", "cannot connect to 10.9.9.9:1: no route to host")
		return 3
	case "lost-all":
		for range 2 + len(f.Then) {
			fmt.Printf("RDMACP lost %q\n", f.To)
		}
	case "count":
		req.Key, req.Connect = f.Key, f.To
		n, err := hostileStream(req, []byte("hello"), br)
		if err != nil {
			fmt.Printf("RDMACP fail 4 %q\n", "hostile: "+err.Error())
			return 4
		}
		fmt.Printf("RDMACP ok %d\n", n+1)
		return 0
	}
	fmt.Println("RDMACP ok 5")
	return 0
}

// execRdmacp runs the real rdmacp, bin, as the remote side that flag
// starts, in place of this process; it returns only if it cannot.
func execRdmacp(bin, flag string) int {
	err := syscall.Exec(bin, []string{bin, flag}, os.Environ())
	fmt.Fprintf(os.Stderr, "hostile: exec %s: %v\n", bin, err)
	return 1
}

// hostileCmd is the --remote-cmd that starts the hostile remote with lie.
func hostileCmd(t *testing.T, lie string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self + " hostile " + lie
}

// hostileBetweenCmd is the --remote-cmd of a copy between two hosts that
// starts, as the sending side, the hostile remote with lie, and, as the
// receiving side, the real rdmacp.
func hostileBetweenCmd(t *testing.T, lie string) string {
	return hostileCmd(t, lie) + " " + bin
}

// hostileHome makes a home directory as an attacker finds it: .bashrc,
// .ssh/authorized_keys, an empty bin/, and a partial copy of nothing
// asked for; it returns the directory and what is in it (see snapshot).
func hostileHome(t *testing.T) (string, map[string]string) {
	home := t.TempDir()
	writeFile(t, filepath.Join(home, ".bashrc"), "# mine\n")
	if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, ".ssh", "authorized_keys"), ownKey)
	if err := os.Mkdir(filepath.Join(home, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	return home, snapshot(t, home)
}

// snapshot returns what is under dir, but for the names in skip: each
// path's mode and content.
func snapshot(t *testing.T, dir string, skip ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if slices.Contains(skip, rel) {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		m[rel] = fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] += " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHostileRemote downloads from a hostile remote rdmacp (see
// hostileMain) into a home directory: a file under another name, an
// archive without -r, a name that the pattern asked for does not match
// (nor is it: after its literal name, or a file for it), an archive of
// another name or with an entry outside the name asked for, a directory or
// a file in one for a pattern without -r, a resume that names .ssh or goes
// through a link.
// Each is refused with exit 9 quoting the remote side's claim, nothing in
// the home directory is written or changed, and a resume offers nothing.
// An entry asked for whose way here is a link is refused too (exit 4,
// the extraction fails).
func TestHostileRemote(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	cases := []struct {
		name  string
		lie   string
		args  []string // before the source and DST
		src   string
		claim string // as quoted
		skip  string // a name asked for, which may be written
	}{
		{"a file under another name", "file-bashrc", nil, "report.txt", `".bashrc"`, ""},
		{"an archive without -r", "archive-keys", nil, "report.txt", `"an archive of report.txt"`, ""},
		{"an archive of another name", "archive-ssh", []string{"-r"}, "dir", `".ssh"`, ""},
		{"an archive of another name for .", "archive-ssh", []string{"-r"}, ".", `".ssh"`, ""},
		{"a name the pattern does not match", "glob-bashrc", nil, "dir/*.txt", `".bashrc"`, ""},
		{"a name after the literal one", "literal-bashrc", nil, "dir/g[1]", `".bashrc"`, ""},
		{"a file for the literal one", "literal-file", nil, "dir/g[1]", `"g[2]"`, ""},
		{"an entry outside the name asked for", "archive-outside", []string{"-r"}, "dir", `".ssh/"`, "dir"},
		{"a file in a directory without -r", "glob-bin", nil, "*", `"bin/planted": a directory, or in one, without -r`, ""},
		{"a directory without -r", "glob-bin-dir", nil, "*", `"bin/": a directory, or in one, without -r`, ""},
		{"a resume that names .ssh", "resume-ssh", []string{"-C", "-r"}, "dir", `".ssh"`, ""},
		{"a resume through a link", "resume-link", []string{"-C", "-r"}, "dir", `"dir/authorized_keys"`, ""},
		// The failure reaches us as our own error or as the remote side's
		// quote of it (which escapes the quotes around "dir"), whichever
		// comes first.
		{"an entry through a link", "archive-link", []string{"-r"}, "dir", `is not a directory here (a link is not followed)`, ""},
		{"a hard link to a file here", "hardlink-keys", []string{"-r", "-H"}, "dir", `not a file this copy wrote`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home, before := hostileHome(t)
			if strings.HasSuffix(tc.lie, "-link") {
				if err := os.Symlink(".ssh", filepath.Join(home, "dir")); err != nil {
					t.Fatal(err)
				}
				before = snapshot(t, home)
			}
			args := append([]string{"--remote-cmd", hostileCmd(t, tc.lie)}, tc.args...)
			r := s.rdmacp(t, append(args, "target:"+tc.src, home)...)
			code, says := 9, "sent what was not asked for: "+tc.claim
			if tc.lie == "archive-link" || tc.lie == "hardlink-keys" { // asked for, but not through a link nor linked to what is here: an output failure
				code, says = 4, tc.claim
			}
			if r.code != code || !strings.Contains(r.stderr, says) {
				t.Errorf("exit %d, want %d saying %s; stderr:\n%s", r.code, code, says, r.stderr)
			}
			if strings.Contains(r.stderr, "hostile read:") {
				t.Errorf("the remote side was offered what is here; stderr:\n%s", r.stderr)
			}
			if after := snapshot(t, home, tc.skip); !maps.Equal(before, after) {
				t.Errorf("the home directory changed: %q, was %q", after, before)
			}
		})
	}
}

// TestHostileOffer resumes an upload to a hostile remote that offers one
// block of 2^47 bytes: the local rdmacp hashes what its source holds (the
// offer matches none of it, so the stream starts at 0) and reports the
// remote side's failure (exit 4); it never allocates the block. A second
// offer for the one file is refused (exit 3).
func TestHostileOffer(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	name := filepath.Join(t.TempDir(), "f")
	makeFile(t, name, 3<<20, false)
	for _, tc := range []struct {
		lie  string
		code int
		says string
	}{
		{"huge-block", 4, `"hostile: no stream after the offer"`},
		{"two-offers", 3, "a second offer from the remote side for one file"},
	} {
		t.Run(tc.lie, func(t *testing.T) {
			t.Parallel()
			r := s.rdmacp(t, "--remote-cmd", hostileCmd(t, tc.lie), "-C", name, "target:/nonexistent/")
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) || !strings.Contains(r.stderr, `hostile read: {"from":0}`) {
				t.Errorf("exit %d, want %d, the stream at 0 and %q; stderr:\n%s", r.code, tc.code, tc.says, r.stderr)
			}
		})
	}
}
