package sendrecv

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/progress"
	"github.com/rdmapipe/rdmapipe/internal/ratelimit"
	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Send runs the rdmasend command with args (args[0] is the program name)
// and returns its exit code.
func Send(args []string) int {
	app := &cli.App{
		Name:      "rdmasend",
		Usage:     "send standard input to an rdmarecv over RDMA (or TCP)",
		UsageText: "rdmasend [flags] HOST[:PORT] < input\n   rdmasend [flags] --to HOST[:PORT],HOST[:PORT],... < input",
		Description: `Connects to rdmarecv on HOST and streams standard input to it. Exits 0 only
after the receiver has verified the length and checksum of the whole stream (XXH3; with
a key, a MAC: the AES-GCM tag of every chunk, chained) and written every byte to its output.

EXAMPLES:
   rdmasend node2 < backup.tar                 # node2 runs: rdmarecv > backup.tar
   zfs send pool/fs@snap | rdmasend -p node2   # with a progress bar
   rdmasend --wait 30s --key-file ~/.rdmapipe.key 10.0.0.2:18801 < weights.bin
   rdmasend --transport tcp -v node2 < file    # force TCP; print a summary
   rdmasend --bench node2                      # node2 runs: rdmarecv --bench
   rdmasend --to node2,node3,node4 < weights.bin  # each runs: rdmarecv --relay-allow 10.0.0.0/8 > weights.bin
   rdmasend --to-file hosts.txt < image.tar    # one host per line

` + exitCodesHelp,
		Flags: append(commonFlags(),
			&cli.StringSliceFlag{Category: catCommon, Name: "to", Usage: "broadcast to `HOSTS`, comma-separated, as a chain\n" +
				"The first relays to the second, and so on, each writing the stream; exit 0 only when every one wrote every byte."},
			&cli.StringFlag{Category: catCommon, Name: "to-file", Usage: "broadcast to the receivers listed in `FILE`\n" +
				"One per line (# starts a comment), after those of --to."},
			&cli.DurationFlag{Category: catCommon, Name: "wait", Aliases: []string{"w"}, Usage: "retry this long until the receiver is up and free\n" +
				"With --to, every receiver down the chain too."},
			&cli.IntFlag{Category: catRDMA, Name: "qps", Value: 1, DefaultText: "1, or 4 to 8 on fast links", Usage: "stripe the stream over `N` RDMA queue pairs (1 to 16)\n" +
				"With --rdma-op write only; the receiver may grant fewer. Without the flag the link's speed chooses: 4 at 200 Gb/s, 8 at 400 Gb/s."},
			command.LimitRateFlag(catCommon, ""),
			&cli.StringFlag{Category: catCommon, Name: "size", Usage: "expected input `SIZE` (K, M, G) for the progress bar\n" +
				"Read from stdin when it is a regular file."},
			&cli.BoolFlag{Category: catTuning, Name: "bench", Usage: "measure throughput at message sizes 1 B to 8 MiB\n" +
				"Instead of sending stdin, against rdmarecv --bench."},
			&cli.DurationFlag{Category: catTuning, Name: "bench-time", Value: time.Second, Usage: "with --bench: how long to measure each size\n" +
				"After a warm-up of a fifth of it."},
			&cli.StringFlag{Category: catTuning, Name: "bench-json", Usage: "with --bench: also write the results as JSON to `FILE`"},
		),
		HideHelpCommand: true,
		OnUsageError:    command.OnUsageError,
		Action:          sendAction,
	}
	return command.Run(app, args, hint)
}

// sendAction is rdmasend's body.
func sendAction(c *cli.Context) error {
	if handled, err := command.Early(c, os.Stdout); handled {
		return err
	}
	hosts, err := receivers(c)
	if err != nil {
		return err
	}
	o, err := parseOptions(c, os.Getenv)
	if err != nil {
		return err
	}
	addrs := make([]string, len(hosts))
	for i, h := range hosts {
		if addrs[i], err = receiverAddr(h, o.port); err != nil {
			return err
		}
	}
	o.send.Chain = addrs[1:]
	if len(o.send.Chain) > 0 && (c.Bool("bench") || c.Bool("check")) {
		return command.Usagef("--bench and --check take one receiver, not a chain")
	}
	if o.rdma.qps, err = qpsOf(c); err != nil {
		return err
	}
	if o.verbose {
		fmt.Fprintln(os.Stderr, describe(o, "rdmasend", false))
	}
	size, err := inputSize(c.String("size"), os.Stdin)
	if err != nil {
		return err
	}
	rate, err := command.LimitRateOf(c, "rdmasend", os.Stderr)
	if err != nil {
		return err
	}
	addr := addrs[0]
	ctx, stop := command.SignalContext()
	defer stop()
	if c.Bool("check") {
		return check(ctx, c, o, addr, "", false, os.Stdout)
	}
	if c.Bool("bench") {
		if c.Duration("bench-time") <= 0 {
			return command.Usagef("--bench-time must be positive")
		}
		d := newDialer(o, os.Stderr, "rdmasend")
		return bench(ctx, d, addr, o, max(c.Duration("wait"), 5*time.Second), c.Duration("bench-time"), c.String("bench-json"), os.Stdout)
	}

	var bar *progress.Meter
	if o.progress {
		bar = newProgress(os.Stderr, size, "sending")
		o.send.Progress = bar.Set
	}
	growPipe(os.Stdin, o.params.Chunk)
	d := newDialer(o, os.Stderr, "rdmasend")
	if len(o.send.Chain) > 0 && len(o.send.Key) > 0 {
		// A keyed broadcast survives a receiver that dies in mid-stream:
		// the one before it goes on with the next (pipe.SendConfig.Repair).
		o.send.Repair = true
		o.send.Dial = func(ctx context.Context, addr string) (conn.Conn, error) { return d.Dial(ctx, addr, o.params) }
	}
	if o.statsEvery > 0 {
		o.send.Gauges = &pipe.Gauges{}
	}
	o.send.HostsEvery = hostsEvery(o)
	stopStats := startStats(o, os.Stderr, "rdmasend", "send", o.send.Gauges, addrs)
	var in io.Reader = os.Stdin
	if rate > 0 {
		in = &ratelimit.Reader{Ctx: ctx, R: os.Stdin, B: ratelimit.NewBucket(rate, ratelimit.System{})}
	}
	st, remote, err := sendWithRetry(ctx, d, addr, o.params, c.Duration("wait"), in, o.send)
	stopStats()
	if bar != nil {
		bar.End(st.Bytes)
	}
	return finish(o, "send", firstReceiver{addr: addr, remote: remote}, st, err)
}

// qpsOf returns the queue pairs --qps asks for, 0 without it (the port's
// rate chooses: rdma.Options.QPs).
func qpsOf(c *cli.Context) (int, error) {
	if !c.IsSet("qps") {
		return 0, nil
	}
	if n := c.Int("qps"); n >= 1 && n <= 16 {
		return n, nil
	}
	return 0, command.Usagef("--qps %d: must be 1 to 16", c.Int("qps"))
}

// receivers returns the receivers rdmasend sends to: the HOST argument,
// or those of --to and --to-file, in order.
func receivers(c *cli.Context) ([]string, error) {
	hosts := c.Args().Slice()
	for _, h := range c.StringSlice("to") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if path := c.String("to-file"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, command.Usagef("--to-file: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line, _, _ = strings.Cut(line, "#"); strings.TrimSpace(line) != "" {
				hosts = append(hosts, strings.TrimSpace(line))
			}
		}
	}
	switch {
	case len(hosts) == 0:
		return nil, command.Usagef("expected a HOST[:PORT] argument or --to (see --help)")
	case c.NArg() > 1 || c.NArg() == 1 && len(hosts) > 1:
		return nil, command.Usagef("give one HOST[:PORT] argument, or the receivers with --to / --to-file, not both (see --help)")
	}
	return hosts, nil
}

// sendWithRetry connects to addr and sends r, retrying for up to wait while
// the receiver (or one down its chain) is not up yet, busy with another
// stream, or drops the connection before the stream began (as it may
// under a flood of other connections). Retrying is safe: nothing is read
// from r before the receiver has welcomed the sender (pipe.Stats.Began),
// and nothing is retried after. It also returns the remote address of the
// last connection to addr, by which pipe.Stats.Lost names the receiver
// there.
func sendWithRetry(ctx context.Context, d conn.Dialer, addr string, p conn.Params, wait time.Duration, r io.Reader, cfg pipe.SendConfig) (pipe.Stats, string, error) {
	deadline := time.Now().Add(wait)
	remote := ""
	for {
		attempt, cancel := context.WithTimeout(ctx, max(time.Until(deadline), 15*time.Second))
		c, err := d.Dial(attempt, addr, p)
		cancel()
		var st pipe.Stats
		if err == nil {
			remote = c.Info().Remote
			st, err = pipe.Send(ctx, c, r, cfg)
			pipe.Release(c, err)
			if err == nil {
				return st, remote, nil
			}
		}
		retry := ctx.Err() == nil && pipe.Retryable(st, err)
		if !retry || time.Now().After(deadline) {
			if wait > 0 && retry {
				return st, remote, fmt.Errorf("gave up after waiting %v (--wait): %w", wait, err)
			}
			return st, remote, err
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return st, remote, err
		}
	}
}

// inputSize returns the stream size for the progress bar: --size if given,
// else the size of stdin when it is a regular file, else -1.
func inputSize(flag string, stdin *os.File) (int64, error) {
	if flag != "" {
		n, err := units.ParseSize(flag)
		if err != nil {
			return 0, command.Usagef("--size: %v", err)
		}
		return n, nil
	}
	if fi, err := stdin.Stat(); err == nil && fi.Mode().IsRegular() {
		return fi.Size(), nil
	}
	return -1, nil
}

// hostsEvery is how often rdmasend asks a keyed chain how far behind its
// hosts are (pipe.SendConfig.HostsEvery): every --stats-interval, or
// every second for --stats-json alone; never without a chain or a key.
func hostsEvery(o options) time.Duration {
	switch {
	case len(o.send.Chain) == 0 || len(o.send.Key) == 0:
		return 0
	case o.statsEvery > 0:
		return o.statsEvery
	case o.statsJSON != "":
		return time.Second
	}
	return 0
}
