package e2e

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestChain16 runs a broadcast through 16 real receivers, each a process
// of its own (on this host: they share its CPUs), kept listening: first an
// empty stream, which the chain sets up and confirms with no data, then a
// stream of data that every receiver must write whole. Its figures (set-up
// per host, rate per host against one hop) are bench/broadcast.sh's long
// chain (make bench-broadcast).
func TestChain16(t *testing.T) {
	const hosts = 16
	size := int64(64 << 20)
	if suite.transport != "tcp" {
		size = 8 << 20 // the VM's emulated devices are slow
	}
	in, want := randomFile(t, size, 16)
	rs, ports, outs := receiversOn(t, hosts, "-k", "--chunk-size", "256K", "--depth", "4")
	s := startSend(t, bytes.NewReader(nil), "--to", addrs(ports))
	code, stderr := s.wait(5 * time.Minute)
	expect(t, "rdmasend of an empty stream", code, stderr, 0, "written by all 16 receivers")

	s = startSend(t, openFile(t, in), "--to", addrs(ports))
	code, stderr = s.wait(10 * time.Minute)
	expect(t, "rdmasend", code, stderr, 0, "written by all 16 receivers")
	for i, r := range rs {
		r.waitStderr(time.Minute, itoa(size)+" bytes in") // its -v summary: the stream is written
		if got, n := fileSum(t, outs[i]); n != size || got != want {
			t.Errorf("receiver %d wrote %d bytes with digest %x, want %d with %x", i, n, got, size, want)
		}
	}
}

// startSend starts rdmasend -v over the suite's transport reading in,
// with args.
func startSend(t *testing.T, in io.Reader, args ...string) *proc {
	return start(t, "rdmasend", in, io.Discard, append([]string{"--transport", suite.transport, "-v"}, args...)...)
}
