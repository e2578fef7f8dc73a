package e2e

import (
	"encoding/json"
	"io"
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
			{[]string{"--help"}, []string{"\n   Common\n", "\n   RDMA\n", "\n   Security\n", "\n   Tuning and benchmarks\n", "--check", "--stats-interval D"}},
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
// and its -v summary carries the CPU time; its progress bar (-p) shows the
// average rate beside the bar's current one.
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
	r.waitStderr(time.Minute, "receiving (average ")
	// The receiver's first interval line with the data, before the stream ends.
	human := regexp.MustCompile(`rdmarecv: +[0-9.]+ s 64\.0 KiB, [0-9.]+ MB/s now, [0-9.]+ MB/s average, \d+ in flight, \d+ stalls`)
	r.waitStderrMatch(time.Minute, human)
	w.Close()
	code, stderr := s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	var line struct {
		Role     string   `json:"role"`
		T        float64  `json:"t"`
		Bytes    int64    `json:"bytes"`
		MBps     *float64 `json:"mb_per_s"`
		Avg      *float64 `json:"avg_mb_per_s"`
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
	if line.Role != "send" || line.T <= 0 || line.MBps == nil || line.Avg == nil || line.InFlight == nil || line.Stalls == nil {
		t.Errorf("stats line %+v lacks a field; stderr:\n%s", line, stderr)
	}
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv", code, stderr, 0, "65536 bytes in", ", CPU ", " s/GiB)")
	if !human.MatchString(stderr) {
		t.Errorf("no human stats line in the receiver's stderr:\n%s", stderr)
	}
}
