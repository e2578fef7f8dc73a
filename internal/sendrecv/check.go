package sendrecv

import (
	"context"
	"io"
	"math"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/doctor"
	"github.com/rdmapipe/rdmapipe/internal/window"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
)

// check runs --check: it checks this host and, with a peer, a real
// connect and handshake with it, prints the report on out (JSON with
// --json) and fails unless a stream would work.
func check(ctx context.Context, c *cli.Context, o options, peer, listen string, receiver bool, out io.Writer) error {
	title := c.App.Name + " --check"
	if peer != "" {
		title += " " + peer
	}
	cfg := doctor.Config{
		Command: title, Peer: peer, Listen: listen, Transport: o.transport,
		RDMA: o.rdmaOpts(), Params: o.params, Key: o.send.Key, HandshakeTimeout: o.send.HandshakeTimeout,
		Memory: memoryFacts(o.window, o.rdmaOpts(), receiver),
	}
	r := doctor.Judge(doctor.Gather(ctx, cfg))
	write := r.WriteText
	if c.Bool("json") {
		write = r.WriteJSON
	}
	if err := write(out); err != nil {
		return conn.Errorf(conn.KindInternal, "", "write the report: %v", err)
	}
	if r.OK {
		return nil
	}
	kind := conn.KindSetup
	if o.transport == "rdma" {
		kind = conn.KindNoRDMA
	}
	return conn.Errorf(kind, "", "check failed: %s", r.Verdict)
}

// memoryFacts describes this process's locked-memory limits and what the
// window w (this side's, the default unless flags set it) and the full
// default window lock on this side, with RDMA options o.
func memoryFacts(w window.Window, o rdma.Options, receiver bool) doctor.Memory {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		lim = unix.Rlimit{Cur: math.MaxUint64, Max: math.MaxUint64}
	}
	h := window.ThisHost()
	full := window.Window{Chunk: window.BigChunk, Depth: window.BigDepth}
	t := transport.Config{Name: "rdma", RDMA: o}
	pins := window.Pins(t.Pins(receiver))
	return doctor.Memory{
		Soft: lim.Cur, Hard: lim.Max, Unlimited: lim.Max == unix.RLIM_INFINITY, CapIPCLock: h.CapIPCLock,
		Window: w.Short(), Locks: locks(w, pins), FullWindow: full.Short(), FullLocks: locks(full, pins),
		HugePages: int64(o.HugePages(w.Params(), receiver)), FullHugePages: int64(o.HugePages(full.Params(), receiver)),
		TooLittle: window.TooLittle(h, window.Either(t.Pins(false), t.Pins(true))),
	}
}
