package rdmacp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// olderPeerFlag, first on the test binary's command line, makes it run as
// olderPeer instead of the tests (see TestMain).
const olderPeerFlag = "--as-rdmacp-9f7b06c"

// olderPeer is the rdmacp of revision 9f7b06c, the last before protocol
// version 2 (downloads, encryption, sparse files), as far as today's
// local side meets it: it knows no --remote-send, and reads the request
// into version 1's fields, refusing any other, then checks the version
// (9f7b06c's readRequest). It returns the exit code; it never copies.
func olderPeer(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if flag := strings.Join(args, " "); flag != "--remote-receive" {
		// urfave/cli's words, through 9f7b06c's command.OnUsageError.
		fmt.Fprintf(stderr, "rdmacp: flag provided but not defined: -%s (see --help)\n", strings.TrimPrefix(flag, "--"))
		return 2
	}
	err := readRequestV1(bufio.NewReader(stdin))
	if err == nil {
		// Today's local side never sends version 1; this peer cannot copy.
		fmt.Fprintf(stdout, "RDMACP fail 1 %s\n", strconv.Quote("the test's older peer was sent a version 1 request"))
		return 1
	}
	// 9f7b06c's status line for a failure of kind conn.KindUsage.
	fmt.Fprintf(stdout, "RDMACP fail 2 %s\n", strconv.Quote("read request: "+err.Error()))
	return 2
}

// requestV1 holds the fields of protocol version 1's request, 9f7b06c's
// Request.
type requestV1 struct {
	Version   int           `json:"version"`
	Key       string        `json:"key"`
	Dest      string        `json:"dest"`
	Mode      string        `json:"mode"`
	Name      string        `json:"name,omitempty"`
	Perm      uint32        `json:"perm,omitempty"`
	Preserve  bool          `json:"preserve,omitempty"`
	ATime     int64         `json:"atime,omitempty"`
	MTime     int64         `json:"mtime,omitempty"`
	Single    bool          `json:"single,omitempty"`
	Listen    string        `json:"listen,omitempty"`
	Transport string        `json:"transport"`
	Timeout   time.Duration `json:"timeout"`
	Verbose   bool          `json:"verbose,omitempty"`
}

// readRequestV1 reads one request line as 9f7b06c did, up to its version
// check: what follows that check, today's local side never reaches.
func readRequestV1(br *bufio.Reader) error {
	line, err := br.ReadBytes('\n')
	if err != nil {
		return err
	}
	var r requestV1
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return err
	}
	if r.Version != 1 {
		return fmt.Errorf("protocol version %d, this rdmacp speaks %d: install the same rdmacp on both hosts", r.Version, 1)
	}
	return nil
}

// TestOlderPeerAnswers holds olderPeer to what a build of 9f7b06c said
// and how it exited, captured on 2026-11-27 from TestOlderPeer's two
// copies (the request line is the upload's, as the local side sent it).
func TestOlderPeerAnswers(t *testing.T) {
	t.Parallel()
	const upload = `{"version":2,"key":"71ff37813757aecc400d519de4aba8338b418412360827f9cdb99b42cc9990fa","dest":"/tmp/TestOlderPeer2763400883/003","mode":"file","name":"f","perm":420,"size":1000,"changed":1795810422102340037,"encrypt":true,"transport":"tcp","timeout":60000000000}` + "\n"
	cases := []struct {
		flag, stdin    string
		stdout, stderr string
	}{
		{"--remote-receive", upload, `RDMACP fail 2 "read request: json: unknown field \"size\""` + "\n", ""},
		{"--remote-send", "", "", "rdmacp: flag provided but not defined: -remote-send (see --help)\n"},
		// What 9f7b06c's code says to a version 2 request of its own fields.
		{"--remote-receive", `{"version":2,"key":"","dest":"d","mode":"file","transport":"tcp","timeout":0}` + "\n",
			`RDMACP fail 2 "read request: protocol version 2, this rdmacp speaks 1: install the same rdmacp on both hosts"` + "\n", ""},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		code := olderPeer([]string{tc.flag}, strings.NewReader(tc.stdin), &stdout, &stderr)
		if code != 2 || stdout.String() != tc.stdout || stderr.String() != tc.stderr {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; 9f7b06c: exit 2, stdout %q, stderr %q", tc.flag, code, stdout.String(), stderr.String(), tc.stdout, tc.stderr)
		}
	}
}

// TestOlderPeer runs the rdmacp of 9f7b06c on the remote side: it cannot
// read today's request, and the copy fails as a setup failure (exit 3)
// that quotes it and says what to do, both ways. The older rdmacp is
// olderPeer, run by this test binary, not a build of 9f7b06c: that needs
// the repository's history, which a shallow clone has not, and a compiler,
// which the VM has not. Its answers are two, held to the real ones by
// TestOlderPeerAnswers: to an upload, a failure status line quoting why
// it cannot read the request (a field it does not know, before its
// version check); to a download, a usage error (no --remote-send) and exit
// 2 without a status line. Today's rdmacp speaking version 1 would not do:
// 9f7b06c never gets to the version, and knows no --remote-send.
func TestOlderPeer(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := startSSHD(t)
	file := filepath.Join(t.TempDir(), "f")
	makeFile(t, file, 1000, false)
	cases := []struct {
		name string
		args []string
		says []string
	}{
		{"upload", []string{file, "target:" + t.TempDir()}, []string{
			`rdmacp: remote side on target: "read request: json: unknown field `,
			`(is the same rdmacp installed there? See --remote-cmd)`}},
		{"download", []string{"target:" + file, t.TempDir()}, []string{
			"rdmacp: flag provided but not defined: -remote-send (see --help)",
			"the remote side ended without a status (exit status 2, a usage error: is the same rdmacp installed there? See --remote-cmd)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := s.rdmacp(t, append([]string{"--remote-cmd", exe + " " + olderPeerFlag}, tc.args...)...)
			if r.code != 3 {
				t.Errorf("exit %d, want 3; stderr:\n%s", r.code, r.stderr)
			}
			for _, w := range tc.says {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			testutil.WaitFor(t, 10*time.Second, "the older peer to exit", func() bool { return !olderPeerRuns(t) })
		})
	}
}

// olderPeerRuns reports whether an olderPeer (or the shell that runs it)
// is still running.
func olderPeerRuns(t *testing.T) bool {
	pids := ours(t, olderPeerFlag)
	if len(pids) > 0 {
		t.Logf("older peers still running: %v", pids)
	}
	return len(pids) > 0
}
