package e2e

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestBench runs a short rdmasend --bench sweep against rdmarecv --bench.
func TestBench(t *testing.T) {
	port := testutil.FreePort(t)
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	r := recv(t, port, io.Discard, "--bench")
	var out strings.Builder
	s := start(t, "rdmasend", nil, &out, append(flags(port, "--wait", "20s", "--bench", "--bench-time", "50ms", "--bench-json", jsonPath), suite.host)...)
	code, stderr := s.wait(3 * time.Minute)
	expect(t, "rdmasend --bench", code, stderr, 0)
	r.cmd.Process.Kill()
	for _, w := range []string{"MiB/s", "1 B", "8 MiB", "over " + suite.transport} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("bench output lacks %q:\n%s", w, out.String())
		}
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Transport string
		Rows      []struct {
			Size, Chunk int
			MiBps       float64 `json:"mib_per_s"`
			Msgs        float64 `json:"messages_per_s"`
		}
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Transport != suite.transport || len(rep.Rows) != 24 {
		t.Fatalf("bench JSON: transport %q with %d rows, want %s with 24", rep.Transport, len(rep.Rows), suite.transport)
	}
	for i, row := range rep.Rows {
		if row.Size != 1<<i || row.Chunk != row.Size || row.MiBps <= 0 || row.Msgs <= 0 {
			t.Errorf("row %d: %+v", i, row)
		}
	}
}

// TestVerboseAndProgress checks that -v and -p talk on stderr only: stdout
// carries the data and nothing else.
func TestVerboseAndProgress(t *testing.T) {
	t.Parallel()
	in, want := randomFile(t, 3<<20, 5)
	port := testutil.FreePort(t)
	out := filepath.Join(t.TempDir(), "output")
	r := recv(t, port, createFile(t, out), "-v", "-p", "--chunk-size", "1M", "--depth", "5")
	s := send(t, port, openFile(t, in), "-v", "-p")
	code, stderr := s.wait(time.Minute)
	// The sender's window comes from its memlock limit (root here: 4 MiB x 8
	// unless limited); the receiver's flags make the negotiated one smaller.
	expect(t, "rdmasend", code, stderr, 0, "3145728 bytes in", "over "+suite.transport, "chunk 1 MiB x 5", "rdmasend: chunk ")
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv", code, stderr, 0, "3145728 bytes in", "listening on", "rdmarecv: chunk 1 MiB x depth 5 (--depth): this side lock")
	if got, n := fileSum(t, out); got != want {
		t.Fatalf("stdout carried %d bytes that differ from the input", n)
	}
}
