package pipe_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// scaleHosts is the length of the simulated chain.
const scaleHosts = 256

// scaleParams are the simulated chain's connections: small, so that 256
// hops' windows stay a few MiB.
var scaleParams = conn.NewParams(32<<10, 4)

// firstByte is a testutil.Buffer that records when its first byte came.
type firstByte struct {
	testutil.Buffer
	once sync.Once
	at   time.Time
}

func (f *firstByte) Write(p []byte) (int, error) {
	f.once.Do(func() { f.at = time.Now() })
	return f.Buffer.Write(p)
}

// scaleHops returns n hops over scaleParams, each with its own key, the
// last one recording its first byte.
func scaleHops(n int) ([]hop, *firstByte) {
	hops := make([]hop, n)
	for i := range hops {
		hops[i] = hop{params: scaleParams, key: fmt.Sprintf("key of hop %d", i)}
	}
	last := &firstByte{}
	hops[n-1].out = last
	return hops, last
}

// TestChainScale streams a few MiB through a chain of 256 receivers over
// memconn, each hop with its own key, relaying to the next by RelayConfig.To
// and Key: every hop must write the exact input, and the sender
// count all of them. It logs the set-up time per host (the time to the
// first byte at the last hop, over the hops) and the chain's rate against
// one hop's for the same bytes: figures to report, not to assert.
func TestChainScale(t *testing.T) {
	// Not parallel: 256 hosts take the CPU for seconds.
	in := randomBytes(1<<20, 31)
	// One hop takes a few milliseconds: the fastest of a few runs.
	oneHop := time.Hour
	for range 5 {
		one, only := scaleHops(1)
		start := time.Now()
		r := runChainWith(t, in, pipe.SendConfig{Key: []byte(one[0].key)}, one, nil, true)
		oneHop = min(oneHop, time.Since(start))
		if r.sendErr != nil || !bytes.Equal(only.Bytes(), in) {
			t.Fatalf("one hop: %v", r.sendErr)
		}
	}

	hops, last := scaleHops(scaleHosts)
	start := time.Now()
	r := runChainWith(t, in, pipe.SendConfig{Key: []byte(hops[0].key)}, hops, nil, true)
	chain := time.Since(start)
	if r.sendErr != nil {
		t.Fatalf("send: %v", r.sendErr)
	}
	if r.receivers != scaleHosts {
		t.Errorf("the sender counted %d receivers, want %d", r.receivers, scaleHosts)
	}
	for i := range scaleHosts {
		out := last.Bytes()
		if i < scaleHosts-1 {
			out = r.outs[i].Bytes()
		}
		if r.errs[i] != nil || !bytes.Equal(out, in) {
			t.Errorf("hop %d: %v; wrote %d bytes, want %d identical ones", i, r.errs[i], len(out), len(in))
		}
	}
	mib := float64(len(in)) / (1 << 20)
	t.Logf("%d hosts, %.0f MiB, chunk %d, depth %d: set-up %v per host (first byte at the last hop after %v)",
		scaleHosts, mib, scaleParams.Chunk, scaleParams.Depth, last.at.Sub(start)/scaleHosts, last.at.Sub(start))
	// The hosts share this machine's cores: a host's own rate is what
	// the chain moved per host in the time it took.
	perHost := mib * scaleHosts / chain.Seconds()
	t.Logf("one hop: %v, %.1f MiB/s; %d hops: %v, %.1f MiB/s per host (%.2f of one hop's rate)",
		oneHop, mib/oneHop.Seconds(), scaleHosts, chain, perHost, perHost*oneHop.Seconds()/mib)
}

// TestChainScaleRepair streams through a chain of 256 receivers, each
// with its own key and the two hosts after its next one as fallbacks,
// where a host in the middle dies mid-stream: the other 255 write the
// exact input, and the sender names the one lost.
func TestChainScaleRepair(t *testing.T) {
	// Not parallel: 256 hosts take the CPU for seconds.
	in := randomBytes(256<<10, 32)
	// The host dies (its connections close): the Timeout only bounds
	// silence, which 256 hosts on two loaded cores can reach for 5 s.
	cfg := pipe.ReceiveConfig{Timeout: 20 * time.Second, HandshakeTimeout: 20 * time.Second}
	faults := map[int]simFault{scaleHosts / 2: {at: 64 << 10}}
	start := time.Now()
	r := sim{hosts: scaleHosts, window: 2, params: conn.NewParams(4096, 4), cfg: cfg, faults: faults}.run(t, in)
	checkSim(t, r, in, scaleHosts, []string{fmt.Sprintf("hop%d", scaleHosts/2)})
	t.Logf("%d hosts, %d KiB, host %d died after %d KiB: %v", scaleHosts, len(in)>>10, scaleHosts/2, 64, time.Since(start))
}

// BenchmarkChainScale streams 1 MiB through the chain of TestChainScale:
// MB/s is the rate at every host (all sharing this machine's cores), and
// µs-setup/host the time to the first byte at the last host over the
// hosts. go test -run '^$' -bench ChainScale ./pipe
func BenchmarkChainScale(b *testing.B) {
	in := randomBytes(1<<20, 31)
	b.SetBytes(int64(len(in)))
	var setup time.Duration
	for b.Loop() {
		hops, last := scaleHops(scaleHosts)
		start := time.Now()
		r := runChainWith(b, in, pipe.SendConfig{Key: []byte(hops[0].key)}, hops, nil, true)
		if r.sendErr != nil || r.receivers != scaleHosts {
			b.Fatalf("send: %v; %d receivers", r.sendErr, r.receivers)
		}
		setup += last.at.Sub(start)
	}
	b.ReportMetric(float64(setup.Microseconds())/float64(b.N)/scaleHosts, "µs-setup/host")
}
