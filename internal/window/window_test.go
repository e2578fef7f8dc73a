package window

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
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

// TestChooseRDMA checks the policy against the RDMA transport's own
// figure: under each limit the window fits on both sides, and the next
// deeper one (where the policy could have gone deeper) does not.
func TestChooseRDMA(t *testing.T) {
	for _, o := range []rdma.Options{rdma.DefaultOptions(), {SendOnly: true}, {QPs: 1}} {
		p := conn.NewParams(1<<20, 4)
		if got, want := ForRelay("rdma", o)(p.Chunk, p.Depth), uint64(o.Pinned(p, true)+o.Pinned(p, false)); got != want {
			t.Errorf("%+v: a relay locks %d bytes for 1 MiB x 4, want a receiver's and a sender's, %d", o, got, want)
		}
		for _, pins := range []Pins{For("rdma", o), ForRelay("rdma", o)} {
			chooseUnder(t, o, pins)
		}
	}
	if For("tcp", rdma.DefaultOptions()) != nil || ForRelay("tcp", rdma.DefaultOptions()) != nil {
		t.Error("TCP locks memory, says For")
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
	pins := For("rdma", rdma.DefaultOptions())
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

// TestFlagsOf checks the reading of --chunk-size and --depth.
func TestFlagsOf(t *testing.T) {
	cases := []struct {
		args []string
		want Flags
		err  string
	}{
		{nil, Flags{}, ""},
		{[]string{"--chunk-size", "8K"}, Flags{Chunk: 8 << 10}, ""},
		{[]string{"--depth", "5"}, Flags{Depth: 5}, ""},
		{[]string{"--chunk-size", "lots"}, Flags{}, "--chunk-size"},
		{[]string{"--chunk-size", "0"}, Flags{}, "chunk size 0 out of range"},
		{[]string{"--chunk-size", "1G"}, Flags{}, "out of range"},
		{[]string{"--depth", "0"}, Flags{}, "depth 0 out of range"},
		{[]string{"--depth", "2"}, Flags{}, "depth 2 out of range"},
	}
	for _, tc := range cases {
		set := flag.NewFlagSet("test", flag.ContinueOnError)
		set.String("chunk-size", "", "")
		set.Int("depth", 0, "")
		if err := set.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		f, err := FlagsOf(cli.NewContext(cli.NewApp(), set, nil))
		switch {
		case tc.err == "" && (err != nil || f != tc.want):
			t.Errorf("%q: %+v, %v; want %+v", tc.args, f, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.err)
		}
	}
}
