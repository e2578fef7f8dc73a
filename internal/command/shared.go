package command

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/internal/ratelimit"
	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/internal/window"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// The flags that more than one command takes, each defined here once: a
// command puts them in a group of its own (category) and, where its other
// flags leave the letters free, gives them short names (aliases).

// ChunkSizeFlag is --chunk-size, the chunk this side proposes.
func ChunkSizeFlag(category string, aliases ...string) cli.Flag {
	return &cli.StringFlag{Category: category, Name: "chunk-size", Aliases: aliases, DefaultText: "4M, or what RLIMIT_MEMLOCK allows",
		Usage: "this side's bytes per message, `SIZE` (K, M)\n" +
			"The smaller of the two sides' values is used. The default is 4M where locked memory is unlimited (or with CAP_IPC_LOCK)."}
}

// DepthFlag is --depth, the buffers per side this side proposes.
func DepthFlag(category string, aliases ...string) cli.Flag {
	return &cli.IntFlag{Category: category, Name: "depth", Aliases: aliases, DefaultText: "8, or 4 or more",
		Usage: "this side's buffers (depth-1 messages in flight)\n" +
			"The smaller of the two sides' values is used. The default is 8 where locked memory is unlimited (or with CAP_IPC_LOCK), else what RLIMIT_MEMLOCK allows (4 or more)."}
}

// LimitRateFlag is --limit-rate; more, if not empty, ends its usage (what
// the rate means in the command).
func LimitRateFlag(category, more string) cli.Flag {
	usage := "send at most `RATE` bytes a second, e.g. 100M, 1.5G\n" +
		"K, M, G and T are binary, as in sizes: 100M is 100 MiB/s (839 Mbit/s), as rsync --bwlimit and pv -L count (scp -l counts Kbit/s). 0 is refused: leave the flag out for no limit. -v says the rate."
	if more != "" {
		usage += " " + more
	}
	return &cli.StringFlag{Category: category, Name: "limit-rate", Usage: usage}
}

// WindowOf reads --chunk-size and --depth from c, 0 for each not given,
// and fails on a size that does not parse or on either out of the
// protocol's range.
func WindowOf(c *cli.Context) (window.Flags, error) {
	var f window.Flags
	if c.IsSet("chunk-size") {
		n, err := units.ParseSize(c.String("chunk-size"))
		if err != nil {
			return f, Usagef("--chunk-size: %v", err)
		}
		f.Chunk = int(min(n, conn.MaxChunk+1))
		if err := conn.NewParams(f.Chunk, conn.MinDepth).Validate(); err != nil {
			return f, Usagef("--chunk-size: %v", err)
		}
	}
	if c.IsSet("depth") {
		f.Depth = c.Int("depth")
		if err := conn.NewParams(conn.MinChunk, f.Depth).Validate(); err != nil {
			return f, Usagef("--depth: %v", err)
		}
	}
	return f, nil
}

// LimitRateOf returns the bytes per second of c's --limit-rate, 0 without
// it, and says it on stderr (with who first) when c's --verbose is set.
func LimitRateOf(c *cli.Context, who string, stderr io.Writer) (int64, error) {
	if !c.IsSet("limit-rate") {
		return 0, nil
	}
	rate, err := ratelimit.Parse(c.String("limit-rate"))
	if err != nil {
		return 0, Usagef("--limit-rate: %v", err)
	}
	if c.Bool("verbose") {
		fmt.Fprintf(stderr, "%s: sending at most %s (--limit-rate)\n", who, ratelimit.Describe(rate))
	}
	return rate, nil
}
