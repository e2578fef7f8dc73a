package e2e

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChain16 runs a broadcast through 16 real receivers, each a process
// of its own (on this host: they share its CPUs), kept listening: first an
// empty stream, whose time is the chain's set-up and confirmation, then a
// stream of data that every receiver must write whole. It reports the
// set-up time per host and the rate per host against one hop measured in
// the same run, as figures (t.Log), not as assertions.
func TestChain16(t *testing.T) {
	const hosts = 16
	size := int64(64 << 20)
	if suite.transport != "tcp" {
		size = 8 << 20 // the VM's emulated devices are slow
	}
	in, want := randomFile(t, size, 16)
	small := []string{"-k", "--chunk-size", "256K", "--depth", "4"}
	timed := func(n int, input func() io.Reader) time.Duration {
		_, ports, _ := receiversOn(t, n, small...)
		start := time.Now()
		s := startSend(t, input(), "--to", addrs(ports))
		code, stderr := s.wait(5 * time.Minute)
		elapsed := time.Since(start)
		expect(t, "rdmasend", code, stderr, 0)
		if n > 1 && !strings.Contains(stderr, "written by all "+strconv.Itoa(n)+" receivers") {
			t.Errorf("rdmasend -v does not count %d receivers:\n%s", n, stderr)
		}
		return elapsed
	}
	empty := func() io.Reader { return bytes.NewReader(nil) }
	data := func() io.Reader { return openFile(t, in) }
	setUp1, setUp16 := timed(1, empty), timed(hosts, empty)
	one := timed(1, data)

	rs, ports, outs := receiversOn(t, hosts, small...)
	start := time.Now()
	s := startSend(t, openFile(t, in), "--to", addrs(ports))
	code, stderr := s.wait(10 * time.Minute)
	chain := time.Since(start)
	expect(t, "rdmasend", code, stderr, 0, "written by all 16 receivers")
	for i, r := range rs {
		r.waitStderr(time.Minute, "bytes in") // its -v summary: the stream is written
		if got, n := fileSum(t, outs[i]); n != size || got != want {
			t.Errorf("receiver %d wrote %d bytes with sha256 %x, want %d with %x", i, n, got, size, want)
		}
	}
	mb := float64(size) / 1e6
	t.Logf("set-up and confirmation: 1 host %v, %d hosts %v: %.2f ms per host after the first",
		setUp1.Round(time.Millisecond), hosts, setUp16.Round(time.Millisecond), float64(setUp16-setUp1)/float64(time.Millisecond)/(hosts-1))
	t.Logf("%.0f MB over %s: one hop %.1f MB/s; %d hosts %.1f MB/s per host, %.2fx one hop, %.2fx in bytes delivered (the %d receivers and the sender share this host's CPUs)",
		mb, suite.transport, mb/one.Seconds(), hosts, mb/chain.Seconds(), one.Seconds()/chain.Seconds(), hosts*one.Seconds()/chain.Seconds(), hosts)
}

// startSend starts rdmasend -v over the suite's transport reading in,
// with args.
func startSend(t *testing.T, in io.Reader, args ...string) *proc {
	return start(t, "rdmasend", in, io.Discard, append([]string{"--transport", suite.transport, "-v"}, args...)...)
}
