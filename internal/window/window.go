// Package window is the one policy that picks the chunk size and depth a
// command proposes for its stream, from what this process may lock and
// what the transport locks for a window.
package window

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// The window used where locking memory is not limited, as on most RDMA
// hosts: 4 MiB chunks (a third fewer per-message costs than 1 MiB in the
// SoftRoCE VM) and 8 buffers.
const (
	BigChunk = 4 << 20
	BigDepth = 8
)

// The smallest chunk the policy picks by itself, and the least depth it
// wants with it.
const (
	smallChunk = 64 << 10
	fairDepth  = 4
)

// Window is a chunk size and depth, why they were chosen, and the
// locked-memory limit they were chosen for (0 when none applies).
type Window struct {
	Chunk, Depth int
	Why          string
	Limit        uint64
}

// Params returns w as the stream parameters a side proposes.
func (w Window) Params() conn.Params { return conn.NewParams(w.Chunk, w.Depth) }

// Short names the window, e.g. "4 MiB x 8".
func (w Window) Short() string { return fmt.Sprintf("%s x %d", units.Size(int64(w.Chunk)), w.Depth) }

// Host is what this process may lock: its hard RLIMIT_MEMLOCK, which the
// RDMA transport raises the soft limit to, and whether it holds
// CAP_IPC_LOCK in its effective set, which lifts the limit.
type Host struct {
	Memlock    uint64 // bytes; unix.RLIM_INFINITY when not limited
	CapIPCLock bool
	Err        error // why the limit is unknown, if it is
}

// Unlimited reports whether h may lock any amount.
func (h Host) Unlimited() bool {
	return h.Err == nil && (h.Memlock == unix.RLIM_INFINITY || h.CapIPCLock)
}

// ThisHost returns the Host of this process.
func ThisHost() Host {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return Host{Err: err}
	}
	return Host{Memlock: lim.Max, CapIPCLock: hasCapIPCLock()}
}

// capIPCLock is the capability that lifts RLIMIT_MEMLOCK.
const capIPCLock = 14

// hasCapIPCLock reports whether this process holds CAP_IPC_LOCK in its
// effective set (root need not: a container drops it).
func hasCapIPCLock() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[capIPCLock/32].Effective&(1<<(capIPCLock%32)) != 0
}

// Flags are the user's --chunk-size and --depth, 0 where not given.
type Flags struct {
	Chunk, Depth int
}

// Pins returns how many bytes one side of a stream locks for a window of
// chunk x depth.
type Pins func(chunk, depth int) uint64

// Either is the Pins of a process that may be either side: the larger of
// what a sender (snd) and a receiver (rcv) lock; nil (nothing locked) if
// snd is.
func Either(snd, rcv Pins) Pins {
	if snd == nil {
		return nil
	}
	return func(chunk, depth int) uint64 { return max(snd(chunk, depth), rcv(chunk, depth)) }
}

// Both is the Pins of a relay, which holds a receiver's connection and a
// sender's at once, both sized for the window: it locks both (it may also
// register its receive buffers for the sender to send from, but copies
// instead where it cannot); nil if snd is.
func Both(snd, rcv Pins) Pins {
	if snd == nil {
		return nil
	}
	return func(chunk, depth int) uint64 { return snd(chunk, depth) + rcv(chunk, depth) }
}

// Choose returns the window a side proposes on host h, with the user's
// flags f, for a transport that locks pins (nil: nothing). Without a
// limit it is BigChunk x BigDepth; under one, the largest chunk from
// BigChunk down to 64 KiB whose window fits with a depth of 4 or more,
// and the largest such depth up to BigDepth. A chunk the user set gets
// the largest depth that fits (conn.MinDepth if none does); a depth the
// user set is taken as it is.
func Choose(h Host, f Flags, pins Pins) Window {
	w := base(h, pins)
	if f.Chunk > 0 {
		w.Chunk, w.Why = f.Chunk, "--chunk-size"
		if w.Limit > 0 {
			w.Depth, _ = fitting(pins, f.Chunk, w.Limit, conn.MinDepth)
		} else {
			w.Depth = BigDepth
		}
	}
	if f.Depth > 0 {
		w.Depth, w.Why = f.Depth, "--depth"
	}
	return w
}

// base is the window Choose picks before the user's flags.
func base(h Host, pins Pins) Window {
	switch {
	case h.Err != nil:
		return Window{conn.DefaultChunk, conn.DefaultDepth, fmt.Sprintf("RLIMIT_MEMLOCK unknown (%v)", h.Err), 0}
	case pins == nil:
		return Window{BigChunk, BigDepth, "the TCP transport locks no memory", 0}
	case h.Memlock == unix.RLIM_INFINITY:
		return Window{BigChunk, BigDepth, "locked memory is not limited here", 0}
	case h.CapIPCLock:
		return Window{BigChunk, BigDepth, "this process may lock memory without limit (CAP_IPC_LOCK)", 0}
	}
	why := fmt.Sprintf("RLIMIT_MEMLOCK is %s here", units.Size(int64(h.Memlock)))
	for chunk := BigChunk; chunk >= smallChunk; chunk /= 2 {
		if depth, ok := fitting(pins, chunk, h.Memlock, fairDepth); ok {
			return Window{chunk, depth, why, h.Memlock}
		}
	}
	return Window{smallChunk, conn.MinDepth, why + " (too little for RDMA: raise it with ulimit -l)", h.Memlock}
}

// TooLittle reports whether h may not lock even the smallest window the
// policy picks by itself, 64 KiB x 4, with a transport that locks pins.
func TooLittle(h Host, pins Pins) bool {
	return h.Err == nil && pins != nil && !h.Unlimited() && pins(smallChunk, fairDepth) > h.Memlock
}

// fitting returns the largest depth from BigDepth down to least whose
// window of chunk fits in limit bytes of locked memory, or least and false
// if none does.
func fitting(pins Pins, chunk int, limit uint64, least int) (int, bool) {
	for depth := BigDepth; depth >= least; depth-- {
		if pins(chunk, depth) <= limit {
			return depth, true
		}
	}
	return least, false
}
