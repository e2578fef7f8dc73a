package sendrecv

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/window"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// DefaultPort is the port a receiver listens on and a sender connects to
// unless told otherwise (TCP and rdma_cm alike).
const DefaultPort = 18800

// options are the settings both commands share, parsed from flags.
type options struct {
	port       int
	transport  string // "auto", "rdma" or "tcp"
	params     conn.Params
	send       pipe.SendConfig    // rdmasend's engine configuration
	recv       pipe.ReceiveConfig // rdmarecv's
	progress   bool
	verbose    bool
	statsJSON  string
	statsEvery time.Duration // --stats-interval; 0: none
	rdma       rdmaOptions
	window     window.Window // the chunk and depth asked for, and why
}

// rdmaOptions select the RDMA device and completion mode.
type rdmaOptions struct {
	device   string
	ibPort   int
	gidIndex int
	busyPoll bool
	sendOnly bool // --rdma-op send
	qps      int  // --qps: asked for (rdmasend), granted at most (rdmarecv)
}

// Flag categories, in the order help shows them (urfave/cli sorts them by
// name).
const (
	catCommon   = "Common"
	catRDMA     = "RDMA"
	catSecurity = "Security"
	catTuning   = "Tuning and benchmarks"
)

// commonFlags are the flags of both commands. Each usage's first line is
// what --help shows; the man page has all of it.
func commonFlags() []cli.Flag {
	return append(command.Flags(), []cli.Flag{
		&cli.IntFlag{Category: catCommon, Name: "port", Aliases: []string{"P"}, Value: DefaultPort, Usage: "port to listen on or connect to (TCP and rdma_cm)"},
		&cli.StringFlag{Category: catCommon, Name: "transport", Aliases: []string{"t"}, Value: "auto", Usage: "`KIND` of connection: auto, rdma or tcp\n" +
			"auto uses RDMA when a device can reach the peer and the peer answers on RDMA, else TCP (-v says which); rdma fails with exit 7 where RDMA cannot be had."},
		&cli.DurationFlag{Category: catCommon, Name: "timeout", Value: 60 * time.Second, Usage: "give up on a peer silent this long (0: never)\n" +
			"Heartbeats keep a live peer heard, so an idle stream is fine. The connect handshake is bounded by the smaller of this and 10 s. The duration needs a unit: 30s, 5m, 1h."},
		&cli.BoolFlag{Category: catCommon, Name: "progress", Aliases: []string{"p"}, Usage: "show a progress bar on stderr\n" +
			"The bytes so far, the rate, the elapsed time and, with a known size (--size, or stdin a regular file), the percentage and the time left."},
		&cli.BoolFlag{Category: catCommon, Name: "verbose", Aliases: []string{"v"}, Usage: "say the transport chosen and sum the stream up on stderr\n" +
			"The summary: bytes, seconds, rate, transport, chunk x depth, CPU. Without -v a stream that works prints nothing."},
		&cli.StringFlag{Category: catCommon, Name: "stats-json", Usage: "write the summary as JSON to `FILE`"},
		&cli.DurationFlag{Category: catCommon, Name: "stats-interval", Usage: "print a JSON line on stderr every `DURATION`\n" +
			"While a stream runs: bytes, the rate over the interval, credits in flight, stalls (a human line with -v)."},
		&cli.BoolFlag{Category: catCommon, Name: "check", Usage: "check that a stream would work, and exit\n" +
			"This host's devices, ports, GIDs, locked memory and huge pages and, for rdmasend, a real connect and handshake (no data) with the receiver over RDMA and TCP; exit 0 only if a stream would work."},
		&cli.BoolFlag{Category: catCommon, Name: "json", Usage: "with --check: print the report as JSON"},
		command.ChunkSizeFlag(catTuning, "c"),
		command.DepthFlag(catTuning, "d"),
		&cli.BoolFlag{Category: catTuning, Name: "busy-poll", Usage: "spin on the completion queue instead of sleeping\n" +
			"The lowest latency, for one core kept busy."},
		&cli.StringFlag{Category: catSecurity, Name: "key-file", Usage: "read the shared secret that both sides need from `FILE`\n" +
			"An HMAC-SHA256 challenge-response: the key never crosses the wire. RDMAPIPE_KEY in the environment can hold the key instead."},
		&cli.StringFlag{Category: catSecurity, Name: "key", Usage: "the shared secret itself (visible in ps)\n" +
			"Other users see it in ps: prefer --key-file or RDMAPIPE_KEY."},
		&cli.BoolFlag{Category: catSecurity, Name: "encrypt", Usage: "encrypt the stream, or refuse senders that do not\n" +
			"Needs a key. rdmasend: encrypt the stream (AES-256-GCM under a key derived from the handshake); rdmarecv: refuse senders that do not (a receiver with a key decrypts whatever is encrypted)."},
		&cli.StringFlag{Category: catRDMA, Name: "device", DefaultText: "the one rdma_cm picks", Usage: "RDMA `DEVICE` to use, e.g. mlx5_0; several, or all\n" +
			"Several (mlx5_0,mlx5_1) or all (every active port that reaches the peer) stripe the queue pairs over them; both sides must say so."},
		&cli.IntFlag{Category: catRDMA, Name: "ib-port", DefaultText: "the one rdma_cm picks", Usage: "RDMA port number to use"},
		&cli.IntFlag{Category: catRDMA, Name: "gid-index", Value: -1, DefaultText: "the one rdma_cm picks", Usage: "GID index to use"},
		&cli.StringFlag{Category: catRDMA, Name: "rdma-op", Value: "write", Usage: "how the data travels: `OP` write or send\n" +
			"write: RDMA WRITE with immediate into the receiver's ring; send: SEND into posted buffers. send on either side wins; iWARP always sends."},
	}...)
}

// parseOptions reads the shared flags and the key.
func parseOptions(c *cli.Context, getenv func(string) string) (options, error) {
	var err error
	o := options{
		port:       c.Int("port"),
		transport:  c.String("transport"),
		progress:   c.Bool("progress"),
		verbose:    c.Bool("verbose"),
		statsJSON:  c.String("stats-json"),
		statsEvery: c.Duration("stats-interval"),
		rdma: rdmaOptions{device: c.String("device"), ibPort: c.Int("ib-port"),
			gidIndex: c.Int("gid-index"), busyPoll: c.Bool("busy-poll"), sendOnly: c.String("rdma-op") == "send"},
	}
	if op := c.String("rdma-op"); op != "write" && op != "send" {
		return o, command.Usagef("--rdma-op %q: must be write or send", op)
	}
	if o.statsEvery < 0 {
		return o, command.Usagef("--stats-interval must not be negative")
	}
	if o.port < 1 || o.port > 65535 {
		return o, command.Usagef("--port %d: must be 1 to 65535", o.port)
	}
	switch o.transport {
	case "auto", "rdma", "tcp":
	default:
		return o, command.Usagef("--transport %q: must be auto, rdma or tcp", o.transport)
	}
	f, err := command.WindowOf(c)
	if err != nil {
		return o, err
	}
	t := o.transportOf(nil, "")
	pins := window.Either(t.Pins(false), t.Pins(true))
	if c.Bool("relay") || c.IsSet("relay-allow") {
		pins = window.Both(t.Pins(false), t.Pins(true))
	}
	o.window = window.Choose(window.ThisHost(), f, pins)
	o.params = o.window.Params()
	timeout := c.Duration("timeout")
	if timeout < 0 {
		return o, command.Usagef("--timeout must not be negative")
	}
	key, err := loadKey(c.String("key-file"), c.String("key"), getenv("RDMAPIPE_KEY"))
	if w := keyFileWarning(c.String("key-file")); w != "" && err == nil {
		fmt.Fprintf(c.App.ErrWriter, "%s: %s\n", c.App.Name, w)
	}
	if n := len(key); n > 0 && n < minKeyLen {
		fmt.Fprintf(c.App.ErrWriter, "%s: warning: the key is only %d bytes; a short key can be guessed offline from one recorded handshake: use %d or more random bytes (head -c 32 /dev/urandom | base64 > key)\n", c.App.Name, n, minKeyLen)
	}
	encrypt := c.Bool("encrypt")
	if encrypt && err == nil && len(key) == 0 {
		return o, command.Usagef("--encrypt needs a shared key: --key-file, --key or RDMAPIPE_KEY")
	}
	handshake := pipe.DefaultHandshakeTimeout
	if timeout > 0 {
		handshake = min(timeout, pipe.DefaultHandshakeTimeout)
	}
	o.send = pipe.SendConfig{Key: key, Encrypt: encrypt, Timeout: timeout, HandshakeTimeout: handshake}
	o.recv = pipe.ReceiveConfig{Key: key, Encrypt: encrypt, Timeout: timeout, HandshakeTimeout: handshake}
	return o, err
}

// minKeyLen is the shortest key accepted without a warning.
const minKeyLen = 16
