package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// Recv runs the rdmarecv command with args (args[0] is the program name)
// and returns its exit code.
func Recv(args []string) int {
	app := &cli.App{
		Name:      "rdmarecv",
		Usage:     "receive a stream from rdmasend over RDMA (or TCP) and write it to standard output",
		UsageText: "rdmarecv [flags] > output",
		Description: fmt.Sprintf(`Listens for one rdmasend (or, with -k, one after another) and writes the
stream to standard output. Exits 0 only when the whole stream arrived, its
length and CRC32C matched, and every byte was written. A truncated or damaged
stream always exits non-zero. Default port: %d.

EXAMPLES:
   rdmarecv > backup.tar                      # node1 runs: rdmasend node2 < backup.tar
   rdmarecv | zfs receive pool/fs
   rdmarecv | gzip -d | rdmasend node3        # relay to the next host
   rdmarecv -k --bind 10.0.0.2 >> all.log     # serve senders one after another
   rdmarecv --bench                           # the other end of rdmasend --bench

`, DefaultPort) + exitCodesHelp,
		Flags: append(commonFlags(),
			&cli.StringFlag{Name: "bind", Aliases: []string{"b"}, Usage: "address to listen on (default: all)"},
			&cli.BoolFlag{Name: "keep-listening", Aliases: []string{"k"}, Usage: "after a stream ends, wait for the next sender; streams are written one after another, never interleaved"},
			&cli.BoolFlag{Name: "bench", Usage: "serve rdmasend --bench: keep listening, accept messages up to 8 MiB, discard the data"},
		),
		HideHelpCommand: true,
		OnUsageError:    onUsageError,
		Action:          recvAction,
	}
	return runApp(app, args)
}

// recvAction is rdmarecv's body.
func recvAction(c *cli.Context) error {
	if c.NArg() != 0 {
		return usagef("rdmarecv takes no arguments, got %q (see --help)", c.Args().Slice())
	}
	o, err := parseOptions(c, os.Getenv)
	if err != nil {
		return err
	}
	keep := c.Bool("keep-listening")
	var out io.Writer = os.Stdout
	if c.Bool("bench") {
		keep, out = true, io.Discard
		o.params.Chunk = max(o.params.Chunk, BenchMaxChunk)
	}
	growPipe(os.Stdout, o.params.Chunk)
	ctx, stop := signalContext()
	defer stop()
	l, err := listen(ctx, o, c.String("bind"), os.Stderr, "rdmarecv")
	if err != nil {
		return err
	}
	defer l.Close()
	if o.verbose {
		fmt.Fprintf(os.Stderr, "rdmarecv: listening on %s\n", l.Addr())
	}
	incoming := make(chan pipe.Conn)
	var serving atomic.Bool
	actx, stopAccepting := context.WithCancel(ctx)
	defer stopAccepting() // before l.Close, so that the accept loop ends quietly
	go acceptLoop(actx, l, incoming, &serving)

	var last error
	for {
		var conn pipe.Conn
		select {
		case conn = <-incoming:
		case <-ctx.Done():
			if keep {
				return last
			}
			return context.Cause(ctx)
		}
		cfg := o.cfg
		var bar interface{ Finish() error }
		if o.progress {
			b := newProgress(os.Stderr, -1, "receiving")
			cfg.Progress = func(n int64) { _ = b.Set64(n) }
			bar = b
		}
		st, err := pipe.Receive(ctx, conn, out, cfg)
		serving.Store(false)
		stuck := errors.Is(err, pipe.ErrStuck)
		if !stuck { // else the process exits with the buffers mapped
			conn.Close()
		}
		if bar != nil {
			_ = bar.Finish()
		}
		err = finish(o, "recv", st, err)
		if !keep || stuck || ctx.Err() != nil || errors.Is(err, syscall.EPIPE) {
			return err
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "rdmarecv: %v (waiting for the next sender)\n", err)
			last = err
		}
	}
}

// acceptLoop hands each sender that connects to the receive loop, and
// refuses senders that connect while a stream is being received (serving).
func acceptLoop(ctx context.Context, l pipe.Listener, incoming chan<- pipe.Conn, serving *atomic.Bool) {
	for {
		conn, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			fmt.Fprintf(os.Stderr, "rdmarecv: refused a connection: %v\n", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if serving.Swap(true) {
			go pipe.Refuse(conn, pipe.KindBusy, "the receiver is busy with another stream: retry later (rdmasend --wait retries)")
			continue
		}
		select {
		case incoming <- conn:
		case <-ctx.Done():
			conn.Close()
			return
		}
	}
}
