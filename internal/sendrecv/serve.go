package sendrecv

import (
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/rdmapipe/rdmapipe/internal/progress"
	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// receiver returns rdmarecv's server on l: streams go to out, or each to
// what open gives (--output, --exec), and with keep it serves the next
// sender when one ends.
//
// Exit status: without keep, that of the one stream served, the one
// sender that claimed the receiver; connections that fail before that are
// logged and skipped (see server.Server.Serve). With keep, 0 when a
// signal ends it between streams; the first stream that fails (a signal
// cutting one too) ends it with its own, unless each stream has its own
// output: then non-zero (the last failure's) once a signal ends it if
// any stream failed, and a stream whose command closed its stdin
// (EPIPE) fails only itself. A failure of this host's
// resources (memlock) ends the receiver unless keep.
func receiver(l conn.Listener, o options, out io.Writer, open func(server.Stream) (*server.Output, error), keep bool, log io.Writer) *server.Server {
	return &server.Server{Listener: l, Out: out, Open: open, Config: o.recv, Log: log, Prog: "rdmarecv", Keep: keep, Rejoin: len(o.recv.Key) > 0,
		Attach: func(cfg *pipe.ReceiveConfig) server.Hooks { return attach(o, cfg, log) },
		Served: func(st pipe.Stats, err error) (error, bool) {
			err = finish(o, "recv", firstReceiver{}, st, err)
			return err, open != nil || !errors.Is(err, syscall.EPIPE)
		},
		Probed: func(remote string) {
			if o.verbose {
				fmt.Fprintf(log, "rdmarecv: %s checked the connection (rdmasend --check); waiting for a stream\n", remote)
			}
		},
	}
}

// attach is rdmarecv's part in each connection: its gauges, reported
// every --stats-interval once it claims the receiver, and a progress bar,
// made when its data flows.
func attach(o options, cfg *pipe.ReceiveConfig, log io.Writer) server.Hooks {
	stopStats := func() {}
	if o.statsEvery > 0 {
		cfg.Gauges = &pipe.Gauges{}
	}
	var bar *progress.Meter
	if o.progress {
		cfg.Progress = func(n int64) {
			if bar == nil {
				bar = newProgress(log, -1, "receiving")
			}
			bar.Set(n)
		}
	}
	return server.Hooks{
		Claimed: func() { stopStats = startStats(o, log, "rdmarecv", "recv", cfg.Gauges, nil) },
		Unclaimed: func() {
			stopStats()
			stopStats = func() {}
		},
		Ended: func(stuck bool) {
			stopStats()
			if bar != nil && !stuck {
				bar.Stop()
			}
		},
	}
}
