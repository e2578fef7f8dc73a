package e2e

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestVersionHelpDocs checks what both commands print and exit 0 with:
// --version, grouped --help, completion scripts and the man page.
func TestVersionHelpDocs(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"rdmasend", "rdmarecv"} {
		cases := []struct {
			args []string
			says []string
		}{
			{[]string{"--version"}, []string{bin + " ", "(github.com/rdmapipe/rdmapipe, revision ", "go1."}},
			{[]string{"--help"}, []string{"\nCommon:\n", "\nRDMA:\n", "\nSecurity:\n", "\nTuning and benchmarks:\n", "--check", "--stats-interval DURATION"}},
			{[]string{"--completion", "bash"}, []string{"complete -o bashdefault -o default -F _" + bin + "_complete " + bin, "--generate-bash-completion"}},
			{[]string{"--completion", "zsh"}, []string{"#compdef " + bin, "compdef _" + bin + " " + bin}},
			{[]string{"--completion", "fish"}, []string{"complete -c " + bin, "-l check", "-l stats-interval"}},
			{[]string{"--man"}, []string{".TH " + bin + " 1", "--check", "--key-file"}},
			{[]string{"--check", "--generate-bash-completion"}, nil},
			{[]string{"--ch", "--generate-bash-completion"}, []string{"--check\n"}},
		}
		for _, tc := range cases {
			t.Run(bin+" "+strings.Join(tc.args, " "), func(t *testing.T) {
				code, stdout, stderr := runCheck(t, nil, bin, tc.args...)
				if code != 0 {
					t.Fatalf("exit %d; stderr:\n%s", code, stderr)
				}
				all := stdout + stderr
				for _, w := range tc.says {
					if !strings.Contains(all, w) {
						t.Errorf("output lacks %q:\n%s", w, all)
					}
				}
			})
		}
	}
}

// TestStatsInterval streams an input fed by hand with --stats-interval on
// both sides: the sender prints JSON lines, the receiver (-v) human ones,
// and its -v summary carries the CPU time; its progress bar (-p) is drawn
// (off a terminal, a line at a time: the first at once).
func TestStatsInterval(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	r := recv(t, port, io.Discard, "-v", "-p", "--stats-interval", "100ms")
	s, w := slowInput(t, port, "--stats-interval", "100ms")
	chunk := strings.Repeat("x", 64<<10)
	if _, err := io.WriteString(w, chunk); err != nil {
		t.Fatal(err)
	}
	s.waitStderr(time.Minute, `"bytes":65536`)
	r.waitStderr(time.Minute, "rdmarecv: ")
	r.waitStderr(time.Minute, "64.0 KiB, ")
	r.waitStderr(time.Minute, "receiving ( 0 B) [0s]\n")
	// The receiver's first interval line with the data, before the stream ends.
	human := regexp.MustCompile(`rdmarecv: +[0-9.]+ s 64\.0 KiB, [0-9.]+ MiB/s now, [0-9.]+ MiB/s average, \d+ in flight, \d+ stalls`)
	r.waitStderrMatch(time.Minute, human)
	w.Close()
	code, stderr := s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	var line struct {
		Role     string   `json:"role"`
		T        float64  `json:"t"`
		Bytes    int64    `json:"bytes"`
		MiBps    *float64 `json:"mib_per_s"`
		Avg      *float64 `json:"avg_mib_per_s"`
		InFlight *int64   `json:"in_flight"`
		Stalls   *int64   `json:"stalls"`
	}
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "{") && strings.Contains(l, `"bytes":65536`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			break
		}
	}
	if line.Role != "send" || line.T <= 0 || line.MiBps == nil || line.Avg == nil || line.InFlight == nil || line.Stalls == nil {
		t.Errorf("stats line %+v lacks a field; stderr:\n%s", line, stderr)
	}
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv", code, stderr, 0, "65536 bytes in", ", CPU ", " s/GiB)")
	if !human.MatchString(stderr) {
		t.Errorf("no human stats line in the receiver's stderr:\n%s", stderr)
	}
}

// TestQuietWhenAllIsWell streams with the default transport (auto) on
// both sides, on a host without RDMA as on one with it, and checks that a
// stream that works prints nothing on stderr without -v (as nc and scp),
// also for rdmarecv -k --output, and that -v says the transport chosen.
func TestQuietWhenAllIsWell(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name      string
		recvFlags []string
		verbose   bool
	}{
		{"stdout", nil, false},
		{"keep-listening output", []string{"-k", "--output", filepath.Join(dir, "s-%n")}, false},
		{"verbose", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := testutil.FreePort(t)
			extra := []string{"--port", itoa(int64(port))}
			if tc.verbose {
				extra = append(extra, "-v")
			}
			r := start(t, "rdmarecv", nil, io.Discard, append(append(extra, "--bind", suite.host), tc.recvFlags...)...)
			s := start(t, "rdmasend", strings.NewReader("quiet\n"), io.Discard, append(extra, "--wait", "20s", suite.host)...)
			code, sendErr := s.wait(time.Minute)
			expect(t, "rdmasend", code, sendErr, 0)
			if len(tc.recvFlags) > 0 {
				waitFile(t, filepath.Join(dir, "s-1"), "quiet\n")
				r.kill()
			} else {
				code, recvErr := r.wait(30 * time.Second)
				expect(t, "rdmarecv", code, recvErr, 0)
			}
			recvErr := r.stderr.String()
			if !tc.verbose {
				if sendErr != "" || recvErr != "" {
					t.Errorf("a stream that worked printed, without -v:\nrdmasend: %q\nrdmarecv: %q", sendErr, recvErr)
				}
				return
			}
			if !strings.Contains(sendErr, " over "+suite.transport+" ") {
				t.Errorf("rdmasend -v does not say the transport %s:\n%s", suite.transport, sendErr)
			}
		})
	}
}

// waitFile waits (bounded) until the file at path holds want.
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(path)
		if err == nil && string(b) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q (%v) after a minute, want %q", path, b, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
