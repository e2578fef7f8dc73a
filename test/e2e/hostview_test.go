package e2e

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// TestHostViewStats: in a keyed chain of three, the middle receiver writes
// to a pipe that nobody reads yet, its lag in a spill file: rdmasend's
// --stats-interval lines name it, by its place and address, as behind by
// MiBs, and once the pipe is read and every host wrote the stream, its
// --stats-json gives each host that reported the most it was reported
// behind: the middle one by far the most, with what it spilled.
func TestHostViewStats(t *testing.T) {
	const n = 32<<20 + 5
	in, want := randomFile(t, n, 46)
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("the watched chain's shared key"), 0o600); err != nil {
		t.Fatal(err)
	}
	stats := filepath.Join(t.TempDir(), "stats.json")
	common := []string{"--key-file", key}
	rs, pr, _, s := slowChain(t, in, 1, common, []string{"--lag-buffer", "1M", "--spill-max", "64M", "--spill-dir", t.TempDir()},
		"--stats-interval", "200ms", "--stats-json", stats)
	addr := regexp.QuoteMeta(net.JoinHostPort(suite.host, slowPort(rs[1].cmd.Args)))
	s.waitStderrMatch(time.Minute, regexp.MustCompile(`rdmasend: host 2 \(`+addr+`\): behind [1-9][0-9]*\.[0-9] MiB, spilled [1-9]`))
	h := xxh3.New()
	if m, err := io.Copy(h, pr); m != n || err != nil || digestOf(h) != want {
		t.Errorf("the slow receiver's output gave %d bytes (%v), want %d with digest %x", m, err, n, want)
	}
	code, stderr := s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0, "written by all 3 receivers")
	for i := range rs {
		code, stderr := rs[i].wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
	}
	var sum struct {
		Hosts []struct {
			Host string `json:"host"`
			Lag  *struct {
				Behind  int64 `json:"behind_bytes"`
				Spilled int64 `json:"spilled_bytes"`
			} `json:"lag"`
		} `json:"hosts"`
	}
	b, err := os.ReadFile(stats)
	if err != nil || json.Unmarshal(b, &sum) != nil || len(sum.Hosts) != 3 {
		t.Fatalf("rdmasend's --stats-json (%v): %s", err, b)
	}
	l := sum.Hosts[1].Lag
	if l == nil || l.Behind < 1<<20 || l.Spilled == 0 {
		t.Fatalf("rdmasend's --stats-json does not show the middle host behind, with a spill: %s", b)
	}
	for _, i := range []int{0, 2} { // the last may have finished before it was asked
		if o := sum.Hosts[i].Lag; o != nil && l.Behind <= 4*o.Behind {
			t.Errorf("rdmasend's --stats-json does not show the middle host by far the most behind: %s", b)
		}
	}
}
