package window

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
)

// flat is a Pins for the table: a window locks its chunks plus 64 KiB.
func flat(chunk, depth int) uint64 { return uint64(chunk*depth + 64<<10) }

// TestChoose checks the window picked for each limit, capability and
// flag: the largest that fits a limit, whatever the effective user (root
// without CAP_IPC_LOCK is limited too), the flags taken as given.
func TestChoose(t *testing.T) {
	const mib = 1 << 20
	inf := uint64(unix.RLIM_INFINITY)
	cases := []struct {
		name         string
		host         Host
		flags        Flags
		pins         Pins
		chunk, depth int
		why          string
	}{
		{"unlimited", Host{Memlock: inf}, Flags{}, flat, BigChunk, BigDepth, "not limited"},
		{"CAP_IPC_LOCK under 8 MiB", Host{Memlock: 8 * mib, CapIPCLock: true}, Flags{}, flat, BigChunk, BigDepth, "CAP_IPC_LOCK"},
		{"without CAP_IPC_LOCK under 8 MiB", Host{Memlock: 8 * mib}, Flags{}, flat, 1 * mib, 7, "RLIMIT_MEMLOCK is 8 MiB"},
		{"64 MiB", Host{Memlock: 64 * mib}, Flags{}, flat, BigChunk, 8, "64 MiB"},
		{"16 MiB", Host{Memlock: 16 * mib}, Flags{}, flat, 2 * mib, 7, "16 MiB"},
		{"300 KiB", Host{Memlock: 300 << 10}, Flags{}, flat, 64 << 10, 3, "too little"},
		{"TCP locks nothing", Host{Memlock: 64 << 10}, Flags{}, nil, BigChunk, BigDepth, "TCP"},
		{"limit unknown", Host{Err: errors.New("no")}, Flags{}, flat, conn.DefaultChunk, conn.DefaultDepth, "unknown"},
		{"--chunk-size under 8 MiB", Host{Memlock: 8 * mib}, Flags{Chunk: 2 * mib}, flat, 2 * mib, 3, "--chunk-size"},
		{"--chunk-size that fits 8 deep", Host{Memlock: 8 * mib}, Flags{Chunk: 64 << 10}, flat, 64 << 10, BigDepth, "--chunk-size"},
		{"--chunk-size unlimited", Host{Memlock: inf}, Flags{Chunk: 8 << 10}, flat, 8 << 10, BigDepth, "--chunk-size"},
		{"--chunk-size with CAP_IPC_LOCK", Host{Memlock: 64 << 10, CapIPCLock: true}, Flags{Chunk: mib}, flat, mib, BigDepth, "--chunk-size"},
		{"--chunk-size nothing fits", Host{Memlock: 64 << 10}, Flags{Chunk: mib}, flat, mib, conn.MinDepth, "--chunk-size"},
		{"--depth", Host{Memlock: 8 * mib}, Flags{Depth: 20}, flat, 1 * mib, 20, "--depth"},
		{"both", Host{Memlock: 64 << 10}, Flags{Chunk: mib, Depth: 16}, flat, mib, 16, "--depth"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := Choose(tc.host, tc.flags, tc.pins)
			if w.Chunk != tc.chunk || w.Depth != tc.depth || !strings.Contains(w.Why, tc.why) {
				t.Errorf("window %d x %d (%s), want %d x %d (%s)", w.Chunk, w.Depth, w.Why, tc.chunk, tc.depth, tc.why)
			}
			if tc.flags == (Flags{}) && w.Limit > 0 && !strings.Contains(w.Why, "too little") && flat(w.Chunk, w.Depth) > w.Limit {
				t.Errorf("%d x %d locks %d bytes, over the limit of %d", w.Chunk, w.Depth, flat(w.Chunk, w.Depth), w.Limit)
			}
		})
	}
}

// rdmaPins is what the RDMA transport with options o locks on one side,
// a receiver's if receiver (as transport.Config.Pins gives it).
func rdmaPins(o rdma.Options, receiver bool) Pins {
	return func(chunk, depth int) uint64 { return uint64(o.Pinned(conn.NewParams(chunk, depth), receiver)) }
}

// TestChooseRDMA checks the policy against the RDMA transport's own
// figure: under each limit the window fits on both sides, and the next
// deeper one (where the policy could have gone deeper) does not.
func TestChooseRDMA(t *testing.T) {
	for _, o := range []rdma.Options{rdma.DefaultOptions(), {SendOnly: true}, {QPs: 1}} {
		p := conn.NewParams(1<<20, 4)
		snd, rcv := rdmaPins(o, false), rdmaPins(o, true)
		if got, want := Both(snd, rcv)(p.Chunk, p.Depth), uint64(o.Pinned(p, true)+o.Pinned(p, false)); got != want {
			t.Errorf("%+v: a relay locks %d bytes for 1 MiB x 4, want a receiver's and a sender's, %d", o, got, want)
		}
		if got, want := Either(snd, rcv)(p.Chunk, p.Depth), uint64(max(o.Pinned(p, true), o.Pinned(p, false))); got != want {
			t.Errorf("%+v: either side locks %d bytes for 1 MiB x 4, want the larger side's, %d", o, got, want)
		}
		for _, pins := range []Pins{Either(snd, rcv), Both(snd, rcv)} {
			chooseUnder(t, o, pins)
		}
	}
	if Either(nil, nil) != nil || Both(nil, nil) != nil {
		t.Error("a transport that locks nothing locks something, say Either or Both")
	}
}

// chooseUnder checks the window chosen with pins under several limits.
func chooseUnder(t *testing.T, o rdma.Options, pins Pins) {
	t.Helper()
	for _, limit := range []uint64{512 << 10, 1 << 20, 8 << 20, 16 << 20, 40 << 20} {
		w := Choose(Host{Memlock: limit}, Flags{}, pins)
		if got := pins(w.Chunk, w.Depth); got > limit && !strings.Contains(w.Why, "too little") {
			t.Errorf("%+v under %d: %s locks %d bytes", o, limit, w.Short(), got)
		}
		if w.Depth < BigDepth && pins(w.Chunk, w.Depth+1) <= limit {
			t.Errorf("%+v under %d: %s, but depth %d fits too", o, limit, w.Short(), w.Depth+1)
		}
	}
}

// TestTooLittle checks when a host cannot lock the smallest window.
func TestTooLittle(t *testing.T) {
	pins := Either(rdmaPins(rdma.DefaultOptions(), false), rdmaPins(rdma.DefaultOptions(), true))
	cases := []struct {
		host Host
		want bool
	}{
		{Host{Memlock: 64 << 10}, true},
		{Host{Memlock: 64 << 10, CapIPCLock: true}, false},
		{Host{Memlock: 8 << 20}, false},
		{Host{Memlock: unix.RLIM_INFINITY}, false},
	}
	for _, tc := range cases {
		if got := TooLittle(tc.host, pins); got != tc.want {
			t.Errorf("%+v: TooLittle %v, want %v", tc.host, got, tc.want)
		}
	}
}
