package testutil

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// given holds every port FreePort has returned in this process. RDMA's
// port space (rdma_cm) is not TCP's: a port that a live rdmarecv holds
// over RoCE looks free to the TCP check, so a test with many receivers
// (TestChain16 keeps 34 listening) could be handed one of its own ports
// again ("rdma_listen: address already in use"). A port is never handed
// out twice, whatever listens on it now.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a TCP port that nothing listens on now, on any address
// (the check listens on all of them, which fails if any one of them is
// taken).
//
// It picks one below the ephemeral range (ip_local_port_range), where
// the kernel's own choice of a port (127.0.0.1:0, or an outgoing
// connection's) falls: such a port could be taken by a relay's or
// another test's connection between this check and the listen. It never
// returns the same port twice in one process.
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
		if take(port) {
			return port
		}
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

// take reports whether port was never given before and is free for TCP
// now, and if so records it as given.
func take(port int) bool {
	given.Lock()
	defer given.Unlock()
	if given.ports[port] {
		return false
	}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	given.ports[port] = true
	return true
}
