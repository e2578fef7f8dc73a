package testutil

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePort returns a TCP port that nothing listens on now, on any address
// (the check listens on all of them, which fails if any one of them is
// taken).
//
// It picks one below the ephemeral range (ip_local_port_range), where
// the kernel's own choice of a port (127.0.0.1:0, or an outgoing
// connection's) falls: such a port could be taken by a relay's or
// another test's connection between this check and the listen.
func FreePort(t testing.TB) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 12000 {
				low = n
			}
		}
	}
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if l, err := net.Listen("tcp", ":"+strconv.Itoa(port)); err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}
