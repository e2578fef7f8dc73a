package e2e

// TestDelay: whole streams across the two-host wire (wire.sh) with a fixed
// netem delay on both veths, several times per delay, each of which must
// complete exactly. It runs only when RDMAPIPE_DELAY_RUNS is set (make
// test-delay: 20 runs per delay; make test-rdma: 1), since it takes minutes.

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// delayBound is how long one stream of faultSize bytes may take before the
// test gives up on it and kills it. rxe keeps only a few dozen packets of
// 1 KiB (the wire's active MTU) in flight per queue pair, so over a long
// round trip it is slow whatever the window: 32 MiB took 12-18 s at 5 ms
// each way and ~60 s at 50 ms in the VM on a loaded machine. The bound is
// five times that, so that only a stream that never ends hits it.
const delayBound = 5 * time.Minute

// hashWriter counts and hashes what a process writes to its stdout.
type hashWriter struct {
	mu sync.Mutex
	h  *xxh3.Hasher
	n  int64
}

func (w *hashWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.h.Write(p)
	w.n += int64(len(p))
	return len(p), nil
}

func (w *hashWriter) sum() (digest, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return digestOf(w.h), w.n
}

// delayEnv reads the runs per delay (RDMAPIPE_DELAY_RUNS), the delays in
// milliseconds (RDMAPIPE_DELAY_MS, default 5,20,50) and the transports
// (RDMAPIPE_DELAY_TRANSPORTS, default rdma).
func delayEnv(t *testing.T) (runs int, delays []int, transports []string) {
	t.Helper()
	s := os.Getenv("RDMAPIPE_DELAY_RUNS")
	if s == "" {
		t.Skip("RDMAPIPE_DELAY_RUNS is not set (make test-delay)")
	}
	runs, err := strconv.Atoi(s)
	if err != nil || runs < 1 {
		t.Fatalf("RDMAPIPE_DELAY_RUNS=%q: want a positive number", s)
	}
	for _, f := range strings.Split(getenv("RDMAPIPE_DELAY_MS", "5,20,50"), ",") {
		ms, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || ms < 0 {
			t.Fatalf("RDMAPIPE_DELAY_MS=%q: want milliseconds, comma-separated", os.Getenv("RDMAPIPE_DELAY_MS"))
		}
		delays = append(delays, ms)
	}
	return runs, delays, strings.Split(getenv("RDMAPIPE_DELAY_TRANSPORTS", "rdma"), ",")
}

// TestDelay streams faultSize bytes across the wire RDMAPIPE_DELAY_RUNS
// times per delay, with the delay on vethA and on vethB (so the round trip
// is twice it), and counts the runs that completed exactly: the receiver
// wrote every byte of the input and both exited 0. Any other run fails the
// test. The counts go to the log and to the file RDMAPIPE_DELAY_RESULTS
// names, if any.
func TestDelay(t *testing.T) {
	w := needWire(t)
	runs, delays, transports := delayEnv(t)
	in, want := faultInput(t)
	var summary strings.Builder
	for _, tr := range transports {
		for _, ms := range delays {
			t.Run(fmt.Sprintf("%s/%dms", tr, ms), func(t *testing.T) {
				w.reset(t)
				t.Cleanup(func() { w.reset(t) })
				delay := strconv.Itoa(ms) + "ms"
				for _, dev := range []string{"vethA", "vethB"} {
					run(t, "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", delay)
				}
				exact, began := 0, time.Now()
				for i := range runs {
					if t.Run(fmt.Sprintf("run%02d", i+1), func(t *testing.T) { delayRun(t, w, tr, in, want) }) {
						exact++
					}
				}
				line := fmt.Sprintf("%s delay %s each way: %d of %d streams of %d MiB exact (%.0fs)\n",
					tr, delay, exact, runs, faultSize>>20, time.Since(began).Seconds())
				t.Log(line)
				summary.WriteString(line)
			})
		}
	}
	t.Logf("summary:\n%s", summary.String())
	if path := os.Getenv("RDMAPIPE_DELAY_RESULTS"); path != "" {
		if err := os.WriteFile(path, []byte(summary.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// delayRun streams the input file across the wire once and checks that it
// arrived whole and exact, with both sides exiting 0.
func delayRun(t *testing.T, w wire, transport, in string, want digest) {
	port := strconv.Itoa(testutil.FreePort(t))
	out := &hashWriter{h: xxh3.New()}
	r := start(t, "rdmarecv", nil, out, "--transport", transport, "--port", port, "--bind", w.b, "-v")
	r.waitStderr(30*time.Second, listening)
	s := start(t, "rdmasend", openFile(t, in), io.Discard, "--transport", transport, "--port", port, "--wait", "20s", "-v", w.b)
	began := time.Now()
	// the receiver may take up to its --timeout (60 s by default) to give
	// up on a sender that failed
	deadline := map[*proc]time.Time{s: began.Add(delayBound)}
	for _, p := range []*proc{s, r} {
		if p == r {
			deadline[r] = s.ended.Add(90 * time.Second)
		}
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline[p])):
			t.Errorf("%s still running %.0fs after the sender started; where it is:\n%s", p.name, time.Since(began).Seconds(), kernelState(p.cmd.Process.Pid))
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	got, n := out.sum()
	secs := time.Since(began).Seconds()
	if s.code != 0 || r.code != 0 || n != faultSize || got != want {
		t.Errorf("rdmasend exited %d, rdmarecv %d; %d of %d bytes arrived (exact: %v) in %.1fs\nrdmasend stderr:\n%s\nrdmarecv stderr:\n%s",
			s.code, r.code, n, faultSize, n == faultSize && got == want, secs, s.stderr.String(), r.stderr.String())
		return
	}
	t.Logf("exact in %.1fs (%.1f MiB/s)", secs, float64(n)/(1<<20)/secs)
}
