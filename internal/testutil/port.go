package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// given holds every port FreePort has returned in this process, each with
// the file whose lock claims it for this process. RDMA's port space
// (rdma_cm) is not TCP's: a port that a live rdmarecv holds over RoCE
// looks free to the TCP check, so a test with many receivers (TestChain16
// keeps 34 listening) could be handed one of its own ports again
// ("rdma_listen: address already in use"). A port is never handed out
// twice, whatever listens on it now.
var given = struct {
	sync.Mutex
	ports map[int]*os.File
}{ports: map[int]*os.File{}}

// FreePort returns a TCP port that nothing listens on now, on any address
// (the check listens on all of them, which fails if any one of them is
// taken), and that no other test process on this machine has been given
// while it runs: the test packages run at once, and one may pick a port
// that another has not started its server on yet.
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
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("rdmapipe-test-ports-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if take(dir, port) {
			return port
		}
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

// take reports whether port was never given before, is claimed by no
// other process (a lock on its file in dir, held until this process
// exits) and is free for TCP now; if so it records it as given.
func take(dir string, port int) bool {
	given.Lock()
	defer given.Unlock()
	if given.ports[port] != nil {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return false
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return false
	}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		f.Close()
		return false
	}
	l.Close()
	given.ports[port] = f
	return true
}
