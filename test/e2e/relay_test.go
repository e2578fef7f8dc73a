package e2e

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestNoOpenRelay checks that a receiver relays a sender's chain only
// where it was told it may: a plain rdmarecv refuses, and so does one
// whose allowlist does not name the next hop (loopback here); the sender
// is told plainly, and the next hop gets no connection at all.
func TestNoOpenRelay(t *testing.T) {
	t.Parallel()
	tcpOnly(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("relay-policy-key-0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		recvArgs []string
		sendArgs []string
		recvSays string
	}{
		{"plain receiver", nil, nil, "this receiver does not relay"},
		{"keyed relay, loopback next hop not named", []string{"--relay", "--key-file", keyFile}, []string{"--key-file", keyFile},
			"loopback, link-local, unspecified or multicast addresses only when the relay allowlist names them"},
		{"allowlist without the next hop", []string{"--relay-allow", "10.9.9.0/24"}, nil, "none of it on the relay allowlist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target, err := net.Listen("tcp", net.JoinHostPort(suite.host, "0"))
			if err != nil {
				t.Fatal(err)
			}
			defer target.Close()
			port := testutil.FreePort(t)
			r := recv(t, port, io.Discard, append([]string{"-v"}, tc.recvArgs...)...)
			r.waitStderr(30*time.Second, listening)
			chain := net.JoinHostPort(suite.host, strconv.Itoa(port)) + "," + target.Addr().String()
			s := start(t, "rdmasend", strings.NewReader("x"), io.Discard, append([]string{"--transport", suite.transport, "--to", chain}, tc.sendArgs...)...)
			code, stderr := s.wait(time.Minute)
			expect(t, "rdmasend", code, stderr, 3, "does not relay", "hint: a receiver relays a broadcast only when started to")
			r.waitStderr(30*time.Second, tc.recvSays)
			// The relay would have connected before it answered the sender.
			target.(*net.TCPListener).SetDeadline(time.Now())
			if c, err := target.Accept(); err == nil {
				c.Close()
				t.Errorf("the receiver connected to the next hop it must not relay to")
			} else if ne := (net.Error)(nil); !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("accept: %v", err)
			}
			r.cmd.Process.Kill()
		})
	}
}

// TestRelayUsage checks that relaying without a key needs an allowlist.
func TestRelayUsage(t *testing.T) {
	t.Parallel()
	r := recv(t, testutil.FreePort(t), io.Discard, "--relay")
	code, stderr := r.wait(30 * time.Second)
	expect(t, "rdmarecv --relay", code, stderr, 2, "--relay without a key needs --relay-allow")
}
