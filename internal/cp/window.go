package cp

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// The window where locking memory is not limited (as on most RDMA hosts,
// and for root): the same as rdmasend's there.
const (
	bigChunk = 4 << 20
	bigDepth = 8
)

// defaultParams returns the chunk size and depth this side proposes: a
// big window where locked memory is not limited, else pipe's defaults,
// which fit the common 8 MiB RLIMIT_MEMLOCK. The two sides use the
// smaller of their proposals.
func defaultParams() conn.Params {
	var lim unix.Rlimit
	if os.Geteuid() == 0 || unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && lim.Max == unix.RLIM_INFINITY {
		return conn.NewParams(bigChunk, bigDepth)
	}
	return conn.NewParams(conn.DefaultChunk, conn.DefaultDepth)
}
