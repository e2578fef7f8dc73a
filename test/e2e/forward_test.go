package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// relayChain starts n rdmarecv, each but the last with --forward to the
// next, last first (a relay connects on when its sender does), and
// returns them with their ports and output files.
func relayChain(t *testing.T, n int, extra ...string) (hops []*proc, ports []int, outs []string) {
	t.Helper()
	ports = make([]int, n)
	for i := range ports {
		ports[i] = testutil.FreePort(t)
	}
	hops, outs = make([]*proc, n), make([]string, n)
	for i := n - 1; i >= 0; i-- {
		outs[i] = filepath.Join(t.TempDir(), "out"+strconv.Itoa(i))
		args := append([]string{"-v"}, extra...)
		if i+1 < n {
			args = append(args, "--forward", net.JoinHostPort(suite.host, strconv.Itoa(ports[i+1])))
		}
		hops[i] = recv(t, ports[i], createFile(t, outs[i]), args...)
		hops[i].waitStderr(30*time.Second, listening)
	}
	return hops, ports, outs
}

// TestForward streams through three receivers chained with --forward: every
// one writes the whole stream and exits 0, and so does the sender.
func TestForward(t *testing.T) {
	t.Parallel()
	const n = 16<<20 + 5
	in, want := randomFile(t, n, 77)
	hops, _, outs := relayChain(t, 3)
	s := send(t, hopsPort(hops, 0), openFile(t, in), "-v")
	code, stderr := s.wait(5 * time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	for i, h := range hops {
		code, stderr := h.wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
		if got, size := fileSum(t, outs[i]); size != n || got != want {
			t.Errorf("receiver %d wrote %d bytes with digest %x, want %d with %x", i, size, got, n, want)
		}
	}
	expect(t, "rdmarecv 0", hops[0].code, hops[0].stderr.String(), 0, "relay to", "zero-copy")
}

// hopsPort returns the port receiver i of a chain listens on.
func hopsPort(hops []*proc, i int) int {
	for j, a := range hops[i].cmd.Args {
		if a == "--port" {
			p, _ := strconv.Atoi(hops[i].cmd.Args[j+1])
			return p
		}
	}
	return 0
}

// TestForwardHopKilled kills the last receiver of a chain mid-stream: the
// sender and the other receivers exit 4, the sender naming the lost one.
func TestForwardHopKilled(t *testing.T) {
	t.Parallel()
	hops, ports, outs := relayChain(t, 3, "--timeout", "20s")
	s, inW := slowInput(t, ports[0], "--timeout", "20s")
	killHop(t, s, inW, hops, ports, outs, 2)
}

// killHop writes into the input w of sender s, which streams to the chain
// rs (listening on ports, writing outs), kills receiver victim once the
// last receiver has data, writes more, and checks that the sender and
// every other receiver exit 4, those before the victim naming it.
func killHop(t *testing.T, s *proc, w *os.File, rs []*proc, ports []int, outs []string, victim int) {
	t.Helper()
	w.Write(bytes.Repeat([]byte("k"), 100000))
	last := len(rs) - 1
	testutil.WaitFor(t, 30*time.Second, "data at the last receiver", func() bool { return fileSize(outs[last]) == 100000 })
	rs[victim].cmd.Process.Signal(syscall.SIGKILL)
	rs[victim].wait(10 * time.Second)
	w.Write(bytes.Repeat([]byte("k"), 100000))
	lost := "forward to " + net.JoinHostPort(suite.host, strconv.Itoa(ports[victim]))
	code, stderr := s.wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 4, lost)
	for i, r := range rs {
		if i == victim {
			continue
		}
		var says []string
		if i < victim {
			says = append(says, lost)
		}
		code, stderr := r.wait(60 * time.Second)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 4, says...)
	}
}

// slowWriter writes through to w, one small piece at a time.
type slowWriter struct{ w *bytes.Buffer }

func (s *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	return s.w.Write(p)
}

// TestForwardSlowHop throttles the middle receiver's output: the chain slows
// down to it and nothing is lost anywhere.
func TestForwardSlowHop(t *testing.T) {
	t.Parallel()
	const n = 4 << 20
	in, want := randomFile(t, n, 78)
	ports := []int{testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)}
	dir := t.TempDir()
	last := filepath.Join(dir, "last")
	h2 := recv(t, ports[2], createFile(t, last), "-v")
	h2.waitStderr(30*time.Second, listening)
	var slow bytes.Buffer
	h1 := recv(t, ports[1], &slowWriter{w: &slow}, "-v", "--forward", net.JoinHostPort(suite.host, strconv.Itoa(ports[2])))
	h1.waitStderr(30*time.Second, listening)
	first := filepath.Join(dir, "first")
	h0 := recv(t, ports[0], createFile(t, first), "-v", "--forward", net.JoinHostPort(suite.host, strconv.Itoa(ports[1])))
	h0.waitStderr(30*time.Second, listening)
	s := send(t, ports[0], openFile(t, in))
	code, stderr := s.wait(5 * time.Minute)
	expect(t, "rdmasend", code, stderr, 0)
	for i, h := range []*proc{h0, h1, h2} {
		code, stderr := h.wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
	}
	for _, out := range []string{first, last} {
		if got, size := fileSum(t, out); size != n || got != want {
			t.Errorf("%s: %d bytes with digest %x, want %d with %x", out, size, got, n, want)
		}
	}
	if slow.Len() != n {
		t.Errorf("the slow receiver wrote %d bytes, want %d", slow.Len(), n)
	}
}

// receiversOn starts n plain rdmarecv and returns them with their ports
// and output files.
func receiversOn(t *testing.T, n int, extra ...string) (rs []*proc, ports []int, outs []string) {
	t.Helper()
	for i := range n {
		ports = append(ports, testutil.FreePort(t))
		outs = append(outs, filepath.Join(t.TempDir(), "out"+strconv.Itoa(i)))
		rs = append(rs, recv(t, ports[i], createFile(t, outs[i]), append([]string{"-v", "--relay-allow", suite.host}, extra...)...))
		rs[i].waitStderr(30*time.Second, listening)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, r := range rs {
				t.Logf("rdmarecv %d (port %d) said:\n%s", i, ports[i], r.stderr.String())
			}
		}
	})
	return rs, ports, outs
}

// addrs returns suite.host with each of ports, comma-separated.
func addrs(ports []int) string {
	var s []string
	for _, p := range ports {
		s = append(s, net.JoinHostPort(suite.host, strconv.Itoa(p)))
	}
	return strings.Join(s, ",")
}

// TestBroadcast sends one stream to three plain receivers with --to (and
// --to-file): each writes all of it; all exit 0.
func TestBroadcast(t *testing.T) {
	t.Parallel()
	const n = 8<<20 + 11
	in, want := randomFile(t, n, 79)
	for _, how := range []string{"--to", "--to-file"} {
		t.Run(how, func(t *testing.T) {
			rs, ports, outs := receiversOn(t, 3)
			arg := addrs(ports)
			if how == "--to-file" {
				arg = filepath.Join(t.TempDir(), "hosts")
				text := "# the chain\n" + strings.ReplaceAll(addrs(ports), ",", "\n") + "\n"
				if err := os.WriteFile(arg, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			stats := filepath.Join(t.TempDir(), "stats.json")
			s := start(t, "rdmasend", openFile(t, in), io.Discard, "--transport", suite.transport, "-v", "--stats-json", stats, how, arg)
			code, stderr := s.wait(5 * time.Minute)
			expect(t, "rdmasend", code, stderr, 0, "written by all 3 receivers")
			checkHosts(t, stats, 3, n)
			for i, r := range rs {
				code, stderr := r.wait(time.Minute)
				expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
				if got, size := fileSum(t, outs[i]); size != n || got != want {
					t.Errorf("receiver %d wrote %d bytes with digest %x, want %d with %x", i, size, got, n, want)
				}
			}
		})
	}
}

// checkHosts checks the per-receiver results of a broadcast's
// --stats-json: n receivers, each ok with bytes bytes.
func checkHosts(t *testing.T, path string, n int, bytes int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Receivers int `json:"receivers"`
		Hosts     []struct {
			Host  string `json:"host"`
			OK    bool   `json:"ok"`
			Bytes int64  `json:"bytes"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if st.Receivers != n || len(st.Hosts) != n {
		t.Fatalf("--stats-json has %d receivers and %d host results, want %d:\n%s", st.Receivers, len(st.Hosts), n, b)
	}
	for _, h := range st.Hosts {
		if !h.OK || h.Bytes != bytes || h.Host == "" {
			t.Errorf("host result %+v, want ok with %d bytes", h, bytes)
		}
	}
}

// TestBroadcastHopKilled kills the middle receiver of a broadcast
// mid-stream: the sender and the others exit non-zero, none with a whole
// stream, the sender naming the lost receiver.
func TestBroadcastHopKilled(t *testing.T) {
	t.Parallel()
	timeout := bounded(20 * time.Second)
	rs, ports, outs := receiversOn(t, 3, "--timeout", timeout)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	s := start(t, "rdmasend", r, io.Discard, "--transport", suite.transport, "--timeout", timeout, "--to", addrs(ports))
	r.Close()
	killHop(t, s, w, rs, ports, outs, 1)
}

// TestBroadcastMixed chains receivers on different transports: the middle
// one listens on TCP only, the others as --transport auto (over rxe in the
// VM: RDMA, then TCP, then RDMA again). Each relay picks its own way on.
func TestBroadcastMixed(t *testing.T) {
	t.Parallel()
	const n = 4<<20 + 3
	in, want := randomFile(t, n, 80)
	transports := []string{"auto", "tcp", "auto"}
	var rs []*proc
	var outs, addrList []string
	for i, tr := range transports {
		port := testutil.FreePort(t)
		out := filepath.Join(t.TempDir(), "out"+strconv.Itoa(i))
		r := start(t, "rdmarecv", nil, createFile(t, out), "-v", "--transport", tr, "--port", strconv.Itoa(port), "--bind", suite.host, "--relay-allow", suite.host)
		r.waitStderr(30*time.Second, listening)
		rs, outs = append(rs, r), append(outs, out)
		addrList = append(addrList, net.JoinHostPort(suite.host, strconv.Itoa(port)))
	}
	s := start(t, "rdmasend", openFile(t, in), io.Discard, "--transport", "auto", "-v", "--to", strings.Join(addrList, ","))
	code, stderr := s.wait(5 * time.Minute)
	expect(t, "rdmasend", code, stderr, 0, "written by all 3 receivers")
	for i, r := range rs {
		code, stderr := r.wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
		if got, size := fileSum(t, outs[i]); size != n || got != want {
			t.Errorf("receiver %d (%s) wrote %d bytes with digest %x, want %d with %x", i, transports[i], size, got, n, want)
		}
		t.Logf("receiver %d (--transport %s): %s", i, transports[i], strings.TrimSpace(stderr[strings.LastIndex(strings.TrimSpace(stderr), "\n")+1:]))
	}
}

// TestBroadcastRepair kills a receiver of a keyed broadcast in
// mid-stream (each started with -k and --relay, as an operator would):
// the one before it goes on with the one after it, which resumes from
// what it wrote, so every other receiver writes the whole stream exactly
// once; rdmasend exits 8 and names the dead one, in -v and --stats-json.
func TestBroadcastRepair(t *testing.T) {
	t.Parallel()
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("the broadcast's shared key"), 0o600); err != nil {
		t.Fatal(err)
	}
	timeout := bounded(5 * time.Second)
	for _, victim := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("receiver %d dies", victim), func(t *testing.T) {
			rs, ports, outs := receiversOn(t, 3, "-k", "--relay", "--key-file", key, "--timeout", timeout)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			stats := filepath.Join(t.TempDir(), "stats.json")
			s := start(t, "rdmasend", r, io.Discard, "--transport", suite.transport, "-v", "--key-file", key, "--timeout", timeout, "--stats-json", stats, "--to", addrs(ports))
			r.Close()
			var want bytes.Buffer
			half := bytes.Repeat([]byte("the first half of the stream "), 20000)
			w.Write(half)
			want.Write(half)
			watch := 2
			if victim == 2 {
				watch = 1
			}
			testutil.WaitFor(t, 30*time.Second, "the first half at a receiver after the victim", func() bool { return fileSize(outs[watch]) == int64(len(half)) })
			rs[victim].cmd.Process.Signal(syscall.SIGKILL)
			rs[victim].wait(10 * time.Second)
			rest := bytes.Repeat([]byte("and the rest, after it died "), 30000)
			w.Write(rest)
			want.Write(rest)
			w.Close()
			lost := net.JoinHostPort(suite.host, strconv.Itoa(ports[victim]))
			code, stderr := s.wait(time.Minute)
			expect(t, "rdmasend", code, stderr, 8, "written by 2 of 3 receivers (lost in mid-stream: ")
			b, err := os.ReadFile(stats)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"exit_code": 8`) || !strings.Contains(string(b), `"ok": false`) {
				t.Errorf("--stats-json does not report the loss:\n%s", b)
			}
			for i := range rs {
				if i == victim {
					continue
				}
				testutil.WaitFor(t, 30*time.Second, "receiver "+strconv.Itoa(i)+" to write the stream", func() bool { return fileSize(outs[i]) >= int64(want.Len()) })
				if got, err := os.ReadFile(outs[i]); err != nil || !bytes.Equal(got, want.Bytes()) {
					t.Errorf("receiver %d wrote %d bytes (%v), want %d identical ones", i, len(got), err, want.Len())
				}
			}
			if victim != 0 && !strings.Contains(stderr, lost) {
				t.Errorf("rdmasend does not name %s:\n%s", lost, stderr)
			}
			t.Logf("rdmasend said:\n%s", stderr)
		})
	}
}

// TestBroadcastWaitsForChain starts rdmasend --wait before the middle
// receiver is up: the first one's relay cannot reach it, which fails the
// set-up before the welcome; rdmasend tries again until the middle one
// is up, and the stream reaches all three.
func TestBroadcastWaitsForChain(t *testing.T) {
	t.Parallel()
	const n = 1<<20 + 5
	in, want := randomFile(t, n, 81)
	ports := []int{testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)}
	outs := make([]string, 3)
	rs := make([]*proc, 3)
	up := func(i int) {
		outs[i] = filepath.Join(t.TempDir(), "out"+strconv.Itoa(i))
		rs[i] = recv(t, ports[i], createFile(t, outs[i]), "-v", "--relay-allow", suite.host)
		rs[i].waitStderr(30*time.Second, listening)
	}
	up(0)
	up(2)
	s := start(t, "rdmasend", openFile(t, in), io.Discard, "--transport", suite.transport, "-v", "--wait", "60s", "--to", addrs(ports))
	rs[0].waitStderr(30*time.Second, "forward to "+net.JoinHostPort(suite.host, strconv.Itoa(ports[1])))
	up(1)
	code, stderr := s.wait(2 * time.Minute)
	expect(t, "rdmasend", code, stderr, 0, "written by all 3 receivers")
	for i, r := range rs {
		code, stderr := r.wait(time.Minute)
		expect(t, "rdmarecv "+strconv.Itoa(i), code, stderr, 0)
		if got, size := fileSum(t, outs[i]); size != n || got != want {
			t.Errorf("receiver %d wrote %d bytes with digest %x, want %d with %x", i, size, got, n, want)
		}
	}
}
