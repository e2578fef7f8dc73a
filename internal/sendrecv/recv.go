package sendrecv

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/urfave/cli/v2"
)

// Recv runs the rdmarecv command with args (args[0] is the program name,
// or guardName for the guard of an --exec command) and returns its exit code.
func Recv(args []string) int {
	if len(args) == 1 && args[0] == guardName {
		return runGuard()
	}
	app := &cli.App{
		Name:      "rdmarecv",
		Usage:     "receive a stream from rdmasend over RDMA (or TCP) and write it to standard output",
		UsageText: "rdmarecv [flags] > output",
		Description: fmt.Sprintf(`Listens for one rdmasend (or, with -k, one after another) and writes the
stream to standard output (or, with --output or --exec, each stream to its own file or
process). Exits 0 only when the whole stream arrived, its length and checksum (XXH3; with
a key, a MAC: the AES-GCM tag of every chunk, chained) matched, and every byte was written. A truncated or damaged stream always exits non-zero:
with -k, at once when the streams share standard output; with --output or --exec, when a
signal ends rdmarecv (the failed stream is reported on stderr, and the next sender served).
Default port: %d.

EXAMPLES:
   rdmarecv > backup.tar                      # node1 runs: rdmasend node2 < backup.tar
   rdmarecv | zfs receive pool/fs
   rdmarecv --sparse > disk.img               # zeros become holes, as cp --sparse=always
   rdmarecv | gzip -d | rdmasend node3        # relay to the next host
   rdmarecv -k -o 'in-%%t-%%n.log'              # serve senders one after another, each to its own file
   rdmarecv -k -e 'tar -x -C /restore'        # each stream to its own tar, which sees a failed one fail
   rdmarecv --bench                           # the other end of rdmasend --bench

`, DefaultPort) + exitCodesHelp,
		Flags: append(commonFlags(),
			&cli.StringFlag{Category: catCommon, Name: "bind", Aliases: []string{"b"}, DefaultText: "all", Usage: "`ADDRESS` to listen on"},
			&cli.IntFlag{Category: catRDMA, Name: "qps", Value: 16, Usage: "grant a sender's --qps up to `N` queue pairs (1 to 16)"},
			&cli.BoolFlag{Category: catCommon, Name: "keep-listening", Aliases: []string{"k"}, Usage: "serve senders one after another\n" +
				"Streams are written one after another, never interleaved. A stream that fails ends rdmarecv with its exit code, the output ending with the part of it that arrived; with --output or --exec a failed stream fails only itself."},
			&cli.StringFlag{Category: catCommon, Name: "forward", Usage: "relay: also send each stream on to `HOST[:PORT]`\n" +
				"With the same key and transport flags; a stream is confirmed only when every host down the line wrote it."},
			&cli.BoolFlag{Category: catCommon, Name: "relay", Usage: "relay a broadcast (rdmasend --to) to the next host\n" +
				"The next receiver the sender names; with a key only for a sender that proved it, without one only to hosts on --relay-allow."},
			&cli.StringSliceFlag{Category: catCommon, Name: "relay-allow", Usage: "relay only to these `HOSTS` (implies --relay)\n" +
				"Names, addresses, networks like 10.0.0.0/8; comma-separated. Loopback and link-local next hops only when named here."},
			&cli.StringFlag{Category: catCommon, Name: "output", Aliases: []string{"o"}, EnvVars: []string{"RDMARECV_OUTPUT"}, Usage: "write each stream to a file of its own, `TEMPLATE`\n" +
				"In the name %n is the stream's number (from 1), %t the UTC time it began (20261127T201045Z) and %% a % (with -k the name must hold %n). The stream is written to .NAME.part-* beside it and linked to NAME once whole and verified, before the sender is told; a failed stream leaves no file (but for the part file of a receiver killed with SIGKILL), and an existing file is never overwritten: that stream fails."},
			&cli.StringFlag{Category: catCommon, Name: "exec", Aliases: []string{"e"}, EnvVars: []string{"RDMARECV_EXEC"}, Usage: "give each stream to a process of its own, sh -c `CMD`\n" +
				"As nc -e: on its stdin, with RDMAPIPE_STREAM (its number, from 1) and RDMAPIPE_PEER (the sender's address) in its environment and rdmarecv's stdout and stderr. The sender is told the stream arrived only once CMD has read it all and exited 0; any other exit fails the stream (the sender exits non-zero). A stream that fails sends SIGTERM to CMD's process group before its stdin is closed, and a guard process kills the group (SIGKILL) if rdmarecv itself is killed, so that a cut stream never looks whole to CMD."},
			&cli.BoolFlag{Category: catCommon, Name: "sparse", Usage: "write blocks of zeros as holes (cp --sparse=always)\n" +
				"The file gets its full length at the end: a sparse file arrives sparse. stdout must be a regular file, not opened for appending (rdmarecv --sparse > FILE); blocks over what the file already held are written."},
			&cli.BoolFlag{Category: catCommon, Name: "sync", Usage: "fsync the output before confirming the stream\n" +
				"So that the sender's exit 0 means the data is on disk: standard output must be a file or a device (or each --output file)."},
			&cli.StringFlag{Category: catTuning, Name: "lag-buffer", Value: "64M", Usage: "in a chain, hold up to `SIZE` in memory that stdout has not taken\n" +
				"With rdmasend --to or --forward, when standard output is a pipe or a terminal (not a regular file): a slow output then holds back no other host. A pipe that keeps up is written straight from the receive buffers. 0: the output sets the chain's pace."},
			&cli.StringFlag{Category: catTuning, Name: "spill-max", Value: "1G", Usage: "beyond --lag-buffer, hold up to `SIZE` more in a spill file\n" +
				"Checked (XXH3) as it is read back. With both full, a host of a keyed chain of two hosts or more leaves it and fails alone (rdmasend exits 8 naming it); any other waits for its output. 0: no spill."},
			&cli.StringFlag{Category: catTuning, Name: "spill-dir", Usage: "make the spill file in `DIR`\n" +
				"Default: a private directory in $TMPDIR. The file is unlinked at once, so it goes when rdmarecv ends."},
			&cli.BoolFlag{Category: catTuning, Name: "bench", Usage: "serve rdmasend --bench\n" +
				"Keep listening, accept messages up to 8 MiB, discard the data."},
		),
		HideHelpCommand: true,
		OnUsageError:    command.OnUsageError,
		Action:          recvAction,
	}
	return command.Run(app, args, hint)
}

// relayWith lets the receiver connect to a next receiver
// (pipe.RelayConfig.Dial), dialing it with the receiver's own transport
// flags and one queue pair, and, with --relay or --relay-allow, relay a
// sender's chain as the policy allows (pipe.RelayConfig.Allow).
func relayWith(c *cli.Context, o *options) error {
	dialing := *o
	dialing.rdma.qps = 1
	d := newDialer(dialing, os.Stderr, "rdmarecv")
	o.recv.Relay.Dial = func(ctx context.Context, addr string) (conn.Conn, error) { return d.Dial(ctx, addr, o.params) }
	if !c.Bool("relay") && !c.IsSet("relay-allow") {
		return nil
	}
	policy, err := parseRelayAllow(c.StringSlice("relay-allow"), o.port)
	if err != nil {
		return err
	}
	if !policy.restricted() && len(o.recv.Key) == 0 {
		return command.Usagef("--relay without a key needs --relay-allow HOSTS: without a key anyone may ask this receiver to connect somewhere")
	}
	o.recv.Relay.Allow = policy.check
	return nil
}

// lagWith sets how far the output of a receiver in a chain may fall
// behind (pipe.ReceiveConfig.Lag) from --lag-buffer, --spill-max and
// --spill-dir.
func lagWith(c *cli.Context, o *options) error {
	for _, f := range []struct {
		name string
		n    *int64
	}{{"lag-buffer", &o.recv.Lag.Memory}, {"spill-max", &o.recv.Lag.Spill}} {
		n, err := units.ParseSize(c.String(f.name))
		if err != nil || n < 0 {
			return command.Usagef("--%s %q: give a size such as 64M or 0", f.name, c.String(f.name))
		}
		*f.n = n
	}
	o.recv.Lag.Dir = c.String("spill-dir")
	if fi, err := os.Stat(o.recv.Lag.Dir); o.recv.Lag.Dir != "" && (err != nil || !fi.IsDir()) {
		return command.Usagef("--spill-dir %q: not a directory", o.recv.Lag.Dir)
	}
	return nil
}

// outputs returns where rdmarecv writes its streams: standard output
// (checked for --sparse and --sync), nothing (--bench), or with --output
// or --exec an output of its own for each stream.
func outputs(c *cli.Context, o *options, keep bool) (io.Writer, func(server.Stream) (*server.Output, error), error) {
	tmpl, cmd := c.String("output"), c.String("exec")
	switch {
	case tmpl != "" && cmd != "":
		return nil, nil, command.Usagef("--output and --exec do not go together")
	case c.Bool("bench") && (tmpl != "" || cmd != "" || c.Bool("sparse")):
		return nil, nil, command.Usagef("--bench discards the data: no --output, --exec or --sparse")
	case c.Bool("bench"):
		return io.Discard, nil, nil
	case cmd != "" && (c.Bool("sparse") || c.Bool("sync")):
		return nil, nil, command.Usagef("--exec takes neither --sparse nor --sync: the command writes the stream (its exit 0 confirms it)")
	case cmd != "":
		return nil, func(st server.Stream) (*server.Output, error) {
			return startHandler(cmd, st, o.params.Chunk, os.Stderr)
		}, nil
	case tmpl != "":
		t, err := parseTemplate(tmpl, keep)
		if err != nil {
			return nil, nil, err
		}
		o.recv.Sparse = c.Bool("sparse")
		sync := c.Bool("sync")
		return nil, func(st server.Stream) (*server.Output, error) { return openLanding(t, st, sync, os.Stderr) }, nil
	}
	if c.Bool("sparse") {
		if err := pipe.SparseOutput(os.Stdout); err != nil {
			return nil, nil, command.Usagef("--sparse needs standard output to be a regular file, not opened for appending (rdmarecv --sparse > FILE): %v", err)
		}
		o.recv.Sparse = true
	}
	if c.Bool("sync") {
		if fi, err := os.Stdout.Stat(); err != nil || !fi.Mode().IsRegular() && fi.Mode()&os.ModeDevice == 0 {
			return nil, nil, command.Usagef("--sync needs standard output to be a file or a block device (rdmarecv --sync > FILE)")
		}
		o.recv.Sync = os.Stdout.Sync
	}
	growPipe(os.Stdout, o.params.Chunk)
	return os.Stdout, nil, nil
}

// recvAction is rdmarecv's body.
func recvAction(c *cli.Context) error {
	if handled, err := command.Early(c, os.Stdout); handled {
		return err
	}
	if c.NArg() != 0 {
		return command.Usagef("rdmarecv takes no arguments, got %q (see --help)", c.Args().Slice())
	}
	o, err := parseOptions(c, os.Getenv)
	if err != nil {
		return err
	}
	if o.rdma.qps = c.Int("qps"); o.rdma.qps < 1 || o.rdma.qps > 16 {
		return command.Usagef("--qps %d: must be 1 to 16", o.rdma.qps)
	}
	if c.Bool("check") {
		ctx, stop := command.SignalContext()
		defer stop()
		return check(ctx, c, o, "", net.JoinHostPort(strings.Trim(c.String("bind"), "[]"), strconv.Itoa(o.port)), true, os.Stdout)
	}
	keep := c.Bool("keep-listening")
	if c.Bool("bench") {
		keep = true
		o.params.Chunk = max(o.params.Chunk, BenchMaxChunk)
	}
	if next := c.String("forward"); next != "" {
		if c.Bool("bench") {
			return command.Usagef("--forward and --bench do not go together")
		}
		if o.recv.Relay.To, err = receiverAddr(next, o.port); err != nil {
			return command.Usagef("--forward %v", err)
		}
	}
	if c.Bool("bench") && (c.Bool("relay") || c.IsSet("relay-allow")) {
		return command.Usagef("--relay and --bench do not go together")
	}
	if !c.Bool("bench") {
		if err := relayWith(c, &o); err != nil {
			return err
		}
	}
	if err := lagWith(c, &o); err != nil {
		return err
	}
	out, open, err := outputs(c, &o, keep)
	if err != nil {
		return err
	}
	ctx, stop := command.SignalContext()
	defer stop()
	l, err := listen(ctx, o, c.String("bind"), os.Stderr, "rdmarecv")
	if err != nil {
		return err
	}
	defer l.Close()
	if o.verbose {
		fmt.Fprintln(os.Stderr, describe(o, "rdmarecv", true))
		fmt.Fprintf(os.Stderr, "rdmarecv: listening on %s\n", l.Addr())
	}
	_, err = receiver(l, o, out, open, keep, os.Stderr).Serve(ctx)
	return err
}
