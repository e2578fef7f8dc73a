package e2e

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// Bounds of a broadcast chain (pipe/chain.go): at most this many receivers
// after the first, each address (host:port) at most this long.
const (
	chainHosts   = 1024
	chainHostLen = 255
)

// longHost returns the k-th of the long chain's addresses: host:port of
// exactly chainHostLen bytes, a valid DNS name (labels of at most 63 bytes)
// under .invalid, which names no host (RFC 6761): a first label "hopNNNN"
// padded with x, three labels of 63 bytes, "invalid".
func longHost(k int, port int) string {
	tail := strings.Repeat("."+strings.Repeat("h", 63), 3) + ".invalid:" + strconv.Itoa(port)
	first := fmt.Sprintf("hop%04d", k)
	return first + strings.Repeat("x", chainHostLen-len(tail)-len(first)) + tail
}

// shortName is how rdmapipe names a long address in its errors (pipe's
// shortName): its first 61 bytes and "...".
func shortName(addr string) string {
	if len(addr) <= 64 {
		return addr
	}
	return addr[:61] + "..."
}

// TestLongChain sends to the longest chain rdmasend takes: the first
// receiver real (a relay allowed to relay to the second), then
// chainHosts-1 more. Their chain messages (over a thousand) travel under
// control credits, so the set-up gets through the first hop; the relay then
// fails to reach the second host, and the sender exits 3 naming that host,
// never with a protocol violation. The relay logs the same and keeps
// listening for its real sender. The second host is either one of the long
// names (none resolves: the relay's policy check refuses it) or, so that
// the relay really dials it, an address where nothing listens; every
// address after it is a long name.
func TestLongChain(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		second    func(port int) (addr, allow string)
		sendSays  []string
		relaySays string
	}{
		{
			name:      "nonexistent",
			second:    func(port int) (string, string) { a := longHost(1, port); h, _, _ := net.SplitHostPort(a); return a, h },
			sendSays:  []string{"does not relay to"},
			relaySays: "does not relay to",
		},
		{
			name: "unreachable",
			second: func(int) (string, string) {
				return net.JoinHostPort(suite.host, strconv.Itoa(testutil.FreePort(t))), suite.host
			},
			sendSays:  []string{"could not connect to it"},
			relaySays: "forward to",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			port := testutil.FreePort(t)
			second, allow := tc.second(port)
			chain := []string{second}
			for k := 2; k < chainHosts; k++ {
				chain = append(chain, longHost(k, port))
			}
			for _, h := range chain[1:] {
				if len(h) != chainHostLen {
					t.Fatalf("long address %q has %d bytes, want %d", h, len(h), chainHostLen)
				}
			}
			r := recv(t, port, io.Discard, "-v", "--relay-allow", allow)
			r.waitStderr(30*time.Second, listening)

			args := []string{"--transport", suite.transport, "-v", "--to", net.JoinHostPort(suite.host, strconv.Itoa(port))}
			// several --to flags: one argument holding the whole chain
			// (261 KB) would exceed the kernel's limit on one argument (128 KiB)
			for i := 0; i < len(chain); i += 64 {
				args = append(args, "--to", strings.Join(chain[i:min(i+64, len(chain))], ","))
			}
			s := start(t, "rdmasend", strings.NewReader("never sent\n"), io.Discard, args...)
			code, stderr := s.wait(5 * time.Minute)
			t.Logf("rdmasend exited %d:\n%s", code, stderr)
			expect(t, "rdmasend", code, stderr, 3, append(tc.sendSays, shortName(second))...)
			r.waitStderr(time.Minute, tc.relaySays+" "+shortName(second))
			for who, text := range map[string]string{"rdmasend": stderr, "rdmarecv": r.stderr.String()} {
				for _, bad := range []string{"protocol violation", "more control messages than", "had room for"} {
					if strings.Contains(strings.ToLower(text), bad) {
						t.Errorf("%s stderr mentions %q:\n%s", who, bad, text)
					}
				}
			}
			if r.exited() {
				t.Errorf("the relay exited %d after a failed relay set-up; it must keep listening for its real sender:\n%s", r.code, r.stderr.String())
			}
		})
	}
}
