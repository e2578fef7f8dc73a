package sendrecv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	os.WriteFile(keyFile, []byte("s3cret\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	cases := []struct {
		name            string
		file, flag, env string
		want            string
		says            string
	}{
		{"none", "", "", "", "", ""},
		{"file, newline trimmed", keyFile, "", "", "s3cret", ""},
		{"flag", "", "k", "", "k", ""},
		{"env", "", "", "e", "e", ""},
		{"two ways", keyFile, "", "e", "", "one way only"},
		{"missing file", filepath.Join(dir, "nope"), "", "", "", "no such file"},
		{"empty file", empty, "", "", "", "is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadKey(tc.file, tc.flag, tc.env)
			if tc.says != "" {
				if err == nil || !strings.Contains(err.Error(), tc.says) || command.ExitCode(err) != command.ExitUsage {
					t.Fatalf("err = %v (exit %d), want a usage error saying %q", err, command.ExitCode(err), tc.says)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestKeyFileWarning checks that a key file others may read or write gets
// a warning naming its mode, and an owner-only one none.
func TestKeyFileWarning(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		mode os.FileMode
		says string
	}{
		{0o600, ""},
		{0o400, ""},
		{0o640, "has mode 0640"},
		{0o644, "has mode 0644"},
		{0o602, "has mode 0602"},
	}
	for _, tc := range cases {
		t.Run(tc.mode.String(), func(t *testing.T) {
			f := filepath.Join(dir, tc.mode.String())
			if err := os.WriteFile(f, []byte("0123456789abcdef"), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(f, tc.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			got := keyFileWarning(f)
			if tc.says == "" && got != "" || tc.says != "" && !strings.Contains(got, tc.says) {
				t.Errorf("warning %q, want one saying %q", got, tc.says)
			}
		})
	}
}

func TestHostPort(t *testing.T) {
	cases := []struct{ in, want string }{
		{"node2", "node2:18800"},
		{"node2:9000", "node2:9000"},
		{"10.0.0.2", "10.0.0.2:18800"},
		{"::1", "[::1]:18800"},
		{"[::1]", "[::1]:18800"},
		{"[fe80::1%eth0]", "[fe80::1%eth0]:18800"},
		{"[fe80::1%eth0]:7000", "[fe80::1%eth0]:7000"},
	}
	for _, tc := range cases {
		if got := hostPort(tc.in, DefaultPort); got != tc.want {
			t.Errorf("hostPort(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSummary(t *testing.T) {
	st := pipe.Stats{Bytes: 3 << 20, Elapsed: 1e9,
		Info: conn.Info{Transport: "rdma", Device: "mlx5_0", Port: 1, DataPath: "write", Local: "a", Remote: "b", Chunk: 1 << 20, Depth: 4}}
	s := newSummary("send", st, nil, 1500*time.Millisecond)
	want := "3145728 bytes in 1.000 s (3.0 MiB/s) over rdma mlx5_0 port 1 (write) a -> b, chunk 1 MiB x 4, CPU 1.50 s (512.00 s/GiB)"
	if got := s.line(); got != want {
		t.Errorf("line() = %q, want %q", got, want)
	}
	striped := st
	striped.Info.Device, striped.Info.QPs, striped.Info.Write, striped.Info.Tuned = "mlx5_0,mlx5_1", 8, 128<<10, "a 400 Gb/s link"
	want = "3145728 bytes in 1.000 s (3.0 MiB/s) over rdma mlx5_0,mlx5_1 port 1 (write, 8 QPs, 128 KiB writes for a 400 Gb/s link) a -> b, chunk 1 MiB x 4, CPU 1.50 s (512.00 s/GiB)"
	if got := newSummary("send", striped, nil, 1500*time.Millisecond).line(); got != want {
		t.Errorf("line() = %q, want %q", got, want)
	}
	path := filepath.Join(t.TempDir(), "s.json")
	failed := newSummary("recv", st, conn.Errorf(conn.KindIntegrity, "", "crc"), time.Second)
	if err := failed.writeJSON(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, w := range []string{`"ok": false`, `"exit_code": 5`, `"transport": "rdma"`, `"device": "mlx5_0"`, `"cpu_seconds": 1`, `"cpu_s_per_gib": 341.33`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("stats JSON lacks %s:\n%s", w, b)
		}
	}
}

// TestGrowPipe checks that a pipe grows towards the chunk size and that a
// larger one is never shrunk.
func TestGrowPipe(t *testing.T) {
	cases := []struct {
		name        string
		before, ask int
		want        int
	}{
		{"grows", 64 << 10, 256 << 10, 256 << 10},
		{"never shrinks", 512 << 10, 64 << 10, 512 << 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, tc.before); err != nil {
				testutil.Unmet(t, "cannot size a pipe here: %v", err)
			}
			growPipe(w, tc.ask)
			got, err := unix.FcntlInt(w.Fd(), unix.F_GETPIPE_SZ, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("pipe size %d after growPipe(%d) from %d, want %d", got, tc.ask, tc.before, tc.want)
			}
		})
	}
}

// TestHints checks the hints a command adds to an error: in its own
// flags, which the library's errors do not name.
func TestHints(t *testing.T) {
	cases := []struct {
		name string
		err  error
		says string
	}{
		{"rdmasend", conn.Errorf(conn.KindAuth, "authenticate", "the receiver requires a shared key"), "--key-file FILE"},
		{"rdmarecv", conn.Errorf(conn.KindAuth, "authenticate", "the sender's key is wrong"), "--key-file FILE"},
		{"rdmasend", conn.Errorf(conn.KindBusy, "", "busy"), "rdmasend --wait DURATION"},
		{"rdmarecv", conn.Errorf(conn.KindBusy, "", "busy"), ""},
		{"rdmasend", conn.Errorf(conn.KindSetup, "", `receiver refused the connection: "this receiver does not relay to h2"`), "rdmarecv --relay-allow HOSTS"},
		{"rdmarecv", conn.Errorf(conn.KindAborted, "wait for sender", "no word from the sender for 5s: giving up"), "--timeout DURATION"},
		{"rdmacp", conn.Errorf(conn.KindAuth, "", "key"), ""},
		{"rdmasend", conn.Errorf(conn.KindIntegrity, "", "checksum mismatch"), ""},
	}
	for _, tc := range cases {
		got := hint(tc.name, tc.err)
		if tc.says == "" && got != "" || !strings.Contains(got, tc.says) {
			t.Errorf("%s, %v: hint %q, want one saying %q", tc.name, tc.err, got, tc.says)
		}
	}
}

// TestHostResults checks that --stats-json gives each receiver of a
// broadcast its own result, the first one too, under the address it was
// given: lost when the engine names it, by that address or (the first)
// by its connection's, and not when the stream ended on another.
func TestHostResults(t *testing.T) {
	first := firstReceiver{addr: "localhost:7000", remote: "127.0.0.1:7000"}
	chain := []string{"h2:7000", "h3:7000"}
	tests := []struct {
		name string
		lost []string
		ok   []bool
	}{
		{"all confirmed", nil, []bool{true, true, true}},
		{"the first lost", []string{"127.0.0.1:7000"}, []bool{false, true, true}},
		{"the first lost, by its given name", []string{"localhost:7000"}, []bool{false, true, true}},
		{"the first and the second lost", []string{"127.0.0.1:7000", "h2:7000"}, []bool{false, false, true}},
		{"the last lost", []string{"h3:7000"}, []bool{true, true, false}},
	}
	for _, tt := range tests {
		st := pipe.Stats{Bytes: 10, Lost: tt.lost, Info: conn.Info{Remote: "h2:7000"}}
		rs := hostResults(first, chain, st)
		if len(rs) != 3 {
			t.Fatalf("%s: %d results, want 3", tt.name, len(rs))
		}
		for i, r := range rs {
			want := append([]string{first.addr}, chain...)[i]
			if r.Host != want || r.OK != tt.ok[i] || (r.Bytes == 10) != tt.ok[i] {
				t.Errorf("%s: result %d is %+v, want host %s ok %v", tt.name, i, r, want, tt.ok[i])
			}
		}
	}
}

// TestHostLagLines checks how rdmasend shows a chain's host reports: each
// host by its place and the address it was given, out-of-range places
// left out, one human line each after the stats line, and in JSON.
func TestHostLagLines(t *testing.T) {
	t.Parallel()
	hosts := []string{"node2:7000", "node3:7000", "node4:7000"}
	report := []pipe.HostLag{{Place: 1}, {Place: 2, Behind: 3 << 20, Spilled: 1 << 19}, {Place: 4, Behind: 1}}
	s := statsLine{Role: "send", Hosts: hostLags(report, hosts), Refused: 2}
	if len(s.Hosts) != 2 || s.Hosts[1].Host != "node3:7000" {
		t.Fatalf("hostLags = %+v, want places 1 and 2 named node2 and node3", s.Hosts)
	}
	lines := strings.Split(s.human("rdmasend"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], ", 2 host reports refused") ||
		lines[1] != "rdmasend: host 1 (node2:7000): behind 0.0 MiB, spilled 0.0 MiB" ||
		lines[2] != "rdmasend: host 2 (node3:7000): behind 3.0 MiB, spilled 0.5 MiB" {
		t.Errorf("the human stats line is:\n%s", strings.Join(lines, "\n"))
	}
	b, err := json.Marshal(s)
	if err != nil || !strings.Contains(string(b), `"hosts":[{"place":1,"host":"node2:7000","behind_bytes":0,"spilled_bytes":0},{"place":2,"host":"node3:7000","behind_bytes":3145728,"spilled_bytes":524288}],"host_reports_refused":2`) {
		t.Errorf("the JSON stats line is %s (%v)", b, err)
	}
}
