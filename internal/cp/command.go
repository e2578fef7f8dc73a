// Package cp is the rdmacp command: the local side, which plans the copy,
// starts the remote side over ssh, hands it a one-time key and streams the
// files (one as is, several as a tar archive), and the remote side, which
// listens, receives through the engine and puts the files in place.
package cp

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/chain"
	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
	"github.com/rdmapipe/rdmapipe/internal/progress"
	"github.com/rdmapipe/rdmapipe/internal/window"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// help is the description in rdmacp's man page.
const help = `Copies files and directories to HOST, or from it, like scp, with the data on an RDMA
connection (or TCP where there is no RDMA path) instead of inside ssh. rdmacp logs in
with the system's ssh (your ~/.ssh/config, keys, agent and jump hosts apply) and starts
"rdmacp --remote-receive" (an upload) or "rdmacp --remote-send" (a download) there,
which must be installed on HOST. Over the ssh channel it passes a one-time random key
(never on a command line). The receiving side listens on a port of the system's choice
(or the first free one of --data-ports, for a firewall):
for an upload HOST, on the address the ssh connection arrived on (or --data-host's);
for a download this host, on its address toward HOST (or toward --data-host). The
sending side connects to it (trying again for up to 15 s if refused or reset before the
stream starts) and streams. Every byte is checked (length and a MAC under the one-time
key) and encrypted with AES-256-GCM unless --no-encrypt; rdmacp exits 0 only when the
receiving side has written everything and put it in place. The remote side exits when
the stream or the ssh session ends.

One regular file travels as is and lands in DST (or DST/NAME when DST is a directory),
written to a temporary name and renamed into place on success. With -r, directories
(and several sources) travel as one tar archive, with permission bits (less the
receiving side's umask and without setuid and setgid, unless -p) and modification
times, symbolic links as links; DST must be a directory, or, for one source, a new name
in an existing directory. A file or link in the way is replaced, never written through;
a directory or device in the way is refused and kept. The holes of sparse files (found
with SEEK_DATA/SEEK_HOLE) are not sent, and stay holes at the destination. A download's
sources are all on one host; as in scp, an argument with a slash before its first colon
is a local path. HOST:PATH may also be written scp://[user@]HOST[:PORT][/PATH], as
OpenSSH's scp takes it (the user and PATH %-encoded; PATH after the slash, so that
scp://h//tmp/f is /tmp/f and scp://h/f is f in the home directory), whose PORT goes to
ssh (before -P's). A source missing among several is left out, named, and the others are
copied (exit 1). A download's source whose last part has a wildcard (HOST:dir/*.txt,
quoted from the local shell) is expanded by the remote rdmacp itself (Go's filepath.Glob,
no shell; * does not match a leading dot), and this side takes only names it matches. As in
scp, a pattern that matches nothing is the literal name (HOST:'g[1]' copies g[1]), and a
pattern's one match is copied as one source is.

--progress (and -v when stderr is a terminal) shows the copy's progress on stderr, as
rsync --info=progress2: bytes, percent, rate, time left, files sent and entries left of
the total (to-chk=LEFT/TOTAL). The sending side counts a tree first (a download's remote
side reports its totals, which only feed the display). On a terminal the line is redrawn
in place; elsewhere --progress prints a line a second, and -v none. Between two remote
hosts and with --to there is no progress line.

The data connection goes straight between the hosts (to the HostName of an ssh alias),
not through ssh or a jump host: use --data-host to name another address of HOST, e.g.
that of its InfiniBand interface.

A copy between two remote hosts (HOST1:SRC... HOST2:DST) goes straight from HOST1 to
HOST2, never through this host: rdmacp starts the sending side on HOST1, checks what it
would send as for a download, starts the receiving side on HOST2 with that and the same
one-time key, and tells HOST1 where HOST2 listens (HOST2's address as ssh resolves it
here, or --data-host's). HOST1 that cannot connect to HOST2 is exit 3, naming the pair;
HOST1's other failures before the stream are its own, named by it.
With -v, HOST1 sums up the stream. -C resumes as for a copy to HOST2, HOST2's offers
passed on to HOST1. With --to HOST,HOST,... and sources on one remote host
(--to HOST1,HOST2 HOST0:SRC... DST), the stream goes from HOST0 down the chain as below,
never through this host.

With --to HOST,HOST,... (or --to-file), the sources go to DST on every host at once as
one stream: this host sends it once, to the first host, which writes it and passes it
on to the next, and so on down the list. The remote sides start in parallel (--fanout
at a time), each with its own one-time key; each is told only where to pass the stream
on and that host's key, so a host relays only along this chain. A host whose remote side
does not start is left out and reported. Each pair of the chain (HOST0 and the first
host, in the form above) connects before any byte moves: a host that cannot connect to
the next one fails the copy, exit 3, naming the pair, and no host has a file of it.
A host given up in mid-stream catches up after the stream from a host that has the
copy in place, resuming its partial copy straight from there. rdmacp exits 0 only when
every host has the copy in place, and 8 when some have and others failed (did not
start, or were given up and could not catch up): stderr and --stats-json name them,
so that a retry can go to just those (--to-file of the failed ones).

--launcher starts the remote side with another command than ssh, e.g. a cluster's own
(srun, clush -N): its words, with %h replaced by HOST (else HOST after them), then the
remote command's. It must pass the remote side's stdin and stdout through as ssh does
(pdsh does not pass stdin: start rdmarecv receivers with it for rdmasend --to instead).

EXAMPLES:
   rdmacp weights.bin node2:/data/             # one file into a directory
   rdmacp -p image.qcow2 alice@node2:vm.qcow2  # keep mode and times; DST relative to home
   rdmacp -r dataset/ node2:/scratch/          # a directory tree
   rdmacp -r a b c.txt node2:/scratch/in/      # several sources into a directory
   rdmacp node2:/data/weights.bin .            # download a file into this directory
   rdmacp -r node2:/scratch/run1 node2:log .   # download a tree and a file
   rdmacp 'node2:logs/*.txt' .                 # the remote side expands the pattern
   rdmacp -r node1:/scratch/run1 node2:/scratch/ # straight from node1 to node2
   rdmacp f scp://alice@node2:2222//data/      # a URI, with ssh's port
   rdmacp -v --data-host 10.10.0.2 big node2:  # ssh to node2, stream to its IB address
   rdmacp -J gw -i ~/.ssh/lab big node2:/tmp/  # ssh options as in scp
   rdmacp --ssh "ssh -F ./ssh_config" f h:/tmp # any ssh command (also RDMACP_SSH)
   rdmacp --to n1,n2,n3 model.bin /data/       # the same copy on three hosts, relayed
   rdmacp --to n1,n2 n0:/data/model.bin /data/ # from n0 down the chain n1, n2
   rdmacp -r --to-file nodes.txt ds/ /scratch/ # the hosts listed in a file
   rdmacp --launcher "srun --overlap -N1 -n1 -w %h" --to-file <(scontrol show hostnames) big /tmp/

EXIT CODES:
   0  success: every byte was delivered and written, and the copy is in place
   1  some of several sources (or of a pattern's matches) were not copied, each named:
      missing, or a directory without -r; the others were copied. Or an internal error
   2  usage error (bad flags or arguments, the only source missing)
   3  setup failure: ssh or the remote side could not start (or is another version),
      DST missing or not writable, cannot connect (between remote hosts, or a host of
      a --to chain to the next one: the pair)
   4  stream aborted: the peer aborted or was lost, interrupted, input or output failed
   5  integrity failure: length, checksum or sequence mismatch
   6  authentication failure (the one-time key did not match)
   7  RDMA requested (--transport rdma) but not available
   8  with several hosts: the copy is in place on some and failed on the others (named)
   9  a download's remote side would send what was not asked for (another name, an
      archive for a file, an entry outside the sources): refused, quoted, not written`

// Main runs the rdmacp command with args (args[0] is the program name)
// and returns its exit code.
func Main(args []string) int {
	code := 0
	a := &cli.App{
		Name:                   "rdmacp",
		Usage:                  "copy files and directories to or from another host over RDMA (or TCP), set up through ssh",
		UsageText:              "rdmacp [-r] [-p] [flags] SRC... [user@]HOST:DST\nrdmacp [-r] [-p] [flags] [user@]HOST:SRC... DST\nrdmacp [-r] [-p] [flags] [user@]HOST1:SRC... [user@]HOST2:DST\nrdmacp [-r] [-p] [flags] --to HOST,HOST,... SRC... DST\nrdmacp [-r] [-p] [flags] --to HOST,HOST,... [user@]HOST0:SRC... DST",
		Description:            help,
		HideHelpCommand:        true,
		UseShortOptionHandling: true,
		Flags:                  flags(),
		OnUsageError:           command.OnUsageError,
		Action: func(c *cli.Context) error {
			if handled, err := command.Early(c, os.Stdout); handled {
				return err
			}
			if serve := remoteSide(c); serve != nil {
				ctx, stop := command.SignalContext(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
				defer stop()
				code = serve(ctx, os.Stdin, os.Stdout, os.Stderr)
				return nil
			}
			return copyAction(c)
		},
	}
	if rc := command.Run(a, args, nil); rc != command.ExitOK {
		return rc
	}
	return code
}

// flags are rdmacp's flags, in their groups.
func flags() []cli.Flag {
	return append(append(command.Flags(),
		&cli.BoolFlag{Category: catCopy, Name: "recursive", Aliases: []string{"r"}, Usage: "copy directories, as a tar archive"},
		&cli.BoolFlag{Category: catCopy, Name: "preserve", Aliases: []string{"p"}, Usage: "keep modes exactly, and a single file's times\n" +
			"Setuid, setgid and sticky too (else less the receiving side's umask, without those); directory copies always keep times."},
		&cli.BoolFlag{Category: catCopy, Name: "resume", Aliases: []string{"C"}, Usage: "go on from what an interrupted copy left\n" +
			"Each file's partial copy is kept under a hidden name next to it: the receiving side proves which prefix of each file it has, and only the rest travels."},
		&cli.BoolFlag{Category: catCopy, Name: "verbose", Aliases: []string{"v"}, Usage: "say the transport chosen and sum the copy up\n" +
			"The summary: bytes, seconds, rate, transport, encryption; on a terminal, --progress's line too. Without -v a copy that works prints nothing."},
		&cli.BoolFlag{Category: catCopy, Name: "progress", Usage: "show the copy's progress on stderr, as rsync's\n" +
			"As rsync --info=progress2: bytes, percent, rate, elapsed time, time left, files sent, entries left of the total (a tree is counted first); redrawn in place on a terminal, else a line a second; none between two remote hosts or with --to."},
		&cli.BoolFlag{Category: catCopy, Name: "compress", Aliases: []string{"z"}, Usage: "refused, with what to do instead\n" +
			"rdmacp does not compress: an RDMA link outruns a compressor."},
		// What an archive keeps besides data, modes and times (see keepFlags).
		&cli.BoolFlag{Category: catKeep, Name: "hard-links", Aliases: []string{"H"}, Usage: "keep hard links as links, each file sent once"},
		&cli.BoolFlag{Category: catKeep, Name: "xattrs", Aliases: []string{"X"}, Usage: "keep extended attributes\n" +
			"user.*, and where both sides are root trusted.* and security.*."},
		&cli.BoolFlag{Category: catKeep, Name: "acls", Aliases: []string{"A"}, Usage: "keep POSIX ACLs, access and default (implies -p)"},
		&cli.BoolFlag{Category: catKeep, Name: "owner", Usage: "keep the owning user, where the receiving side is root\n" +
			"By name, else by number (-o is ssh's, as in scp)."},
		&cli.BoolFlag{Category: catKeep, Name: "group", Aliases: []string{"g"}, Usage: "keep the group, where the receiving side is root\n" +
			"By name, else by number."},
		&cli.BoolFlag{Category: catKeep, Name: "devices", Aliases: []string{"D"}, Usage: "copy devices and named pipes (sockets are skipped)\n" +
			"Devices are made where the receiving side is root."},
		&cli.BoolFlag{Category: catKeep, Name: "numeric-ids", Usage: "with --owner and -g, keep ids by number, not name"},
		// An incremental copy, as rsync's (see incr.go).
		&cli.BoolFlag{Category: catIncr, Name: "archive", Aliases: []string{"a"}, Usage: "as rsync -a: -r, -p, links, and skip unchanged files\n" +
			"A tree's files that the destination has with the same size and modification time are not sent."},
		&cli.BoolFlag{Category: catIncr, Name: "update", Aliases: []string{"u"}, Usage: "skip files that are newer at the destination"},
		&cli.BoolFlag{Category: catIncr, Name: "checksum", Aliases: []string{"c"}, Usage: "skip files with the same size and XXH3 hash\n" +
			"Both sides read every file."},
		&cli.BoolFlag{Category: catIncr, Name: "size-only", Usage: "skip files with the same size"},
		&cli.BoolFlag{Category: catIncr, Name: "ignore-existing", Usage: "skip every file the destination has"},
		&cli.BoolFlag{Category: catIncr, Name: "delete", Usage: "remove what the sources do not have\n" +
			"Under the copied directories at the destination, never through a link."},
		&cli.BoolFlag{Category: catIncr, Name: "delete-excluded", Usage: "as --delete, and remove what the excludes leave out\n" +
			"What the filter rules exclude under the copied directories at the destination goes too, as rsync's --delete-excluded."},
		&cli.BoolFlag{Category: catIncr, Name: "dry-run", Aliases: []string{"n"}, Usage: "list what a tree's copy would send and remove, only"},
		&cli.BoolFlag{Category: catIncr, Name: "itemize-changes", Usage: "list each change as rsync -i does\n" +
			">f+++++++++ a new file, >f.st...... size and time, *deleting, cd+++++++++ a new directory; < when sending. -i is ssh's identity here."},
		&cli.IntFlag{Category: catSSH, Name: "ssh-port", Aliases: []string{"P"}, Usage: "ssh `PORT` on HOST (ssh -p)"},
		&cli.StringFlag{Category: catSSH, Name: "identity", Aliases: []string{"i"}, Usage: "ssh identity `FILE` (ssh -i)"},
		&cli.StringFlag{Category: catSSH, Name: "ssh-config", Aliases: []string{"F"}, Usage: "ssh config `FILE` (ssh -F)"},
		&cli.StringFlag{Category: catSSH, Name: "jump", Aliases: []string{"J"}, Usage: "ssh jump `HOST` (ssh -J)\n" +
			"The stream itself still goes straight to HOST."},
		&cli.StringSliceFlag{Category: catSSH, Name: "ssh-option", Aliases: []string{"o"}, Usage: "ssh `OPTION`, e.g. -o ConnectTimeout=5 (repeatable)"},
		&cli.StringFlag{Category: catSSH, Name: "ssh", Value: "ssh", EnvVars: []string{"RDMACP_SSH"}, Usage: "the ssh `COMMAND`, split at spaces\n" +
			"E.g. \"ssh -F cfg\"."},
		&cli.StringFlag{Category: catSSH, Name: "remote-cmd", Value: "rdmacp", EnvVars: []string{"RDMACP_REMOTE_CMD"}, Usage: "rdmacp on HOST as its shell runs it, `PATH`\n" +
			"E.g. /opt/bin/rdmacp."},
		&cli.StringFlag{Category: catSSH, Name: "launcher", EnvVars: []string{"RDMACP_LAUNCHER"}, Usage: "start the remote side with `CMD` instead of ssh\n" +
			"Its words (split at spaces; %h is replaced by HOST, else HOST follows them), then the remote command's; it must pass the remote side's stdin and stdout as ssh does (srun, clush -N: see README)."},
		&cli.StringFlag{Category: catData, Name: "data-host", Usage: "HOST's `ADDRESS` for the stream, e.g. its InfiniBand one\n" +
			"Instead of the one ssh connects to; between two remote hosts, HOST2's."},
		&cli.StringFlag{Category: catData, Name: "transport", Aliases: []string{"t"}, Value: "auto", Usage: "`KIND` of connection: auto, rdma or tcp\n" +
			"auto uses RDMA when a device can reach HOST, else TCP (-v says which)."},
		&cli.DurationFlag{Category: catData, Name: "timeout", Value: defaultTimeout, Usage: "give up on a peer silent this long (0: never)\n" +
			"The duration needs a unit: 30s, 5m, 1h."},
		command.LimitRateFlag(catData, "Either way: a download's remote side is told."),
		&cli.StringFlag{Category: catData, Name: "data-ports", Usage: "listen for the stream on the first free port of `LO-HI`\n" +
			"Or one port, e.g. one a firewall lets through, instead of one of the system's choice: the receiving side does (HOST for an upload, this host for a download)."},
		&cli.BoolFlag{Category: catData, Name: "no-encrypt", Usage: "do not encrypt the stream (still authenticated)\n" +
			"For a fabric where nobody can read the traffic: the stream is still authenticated and checked."},
		command.ChunkSizeFlag(catData),
		command.DepthFlag(catData),
		&cli.StringSliceFlag{Category: catHosts, Name: "to", Usage: "copy to each of these `HOSTS` at once, relayed\n" +
			"[user@]HOST, comma-separated or repeated: one stream relayed from host to host in this order; DST is then a path on each."},
		&cli.StringFlag{Category: catHosts, Name: "to-file", Usage: "as --to, with the hosts listed in `FILE`\n" +
			"One or more per line, # comments; - for stdin; e.g. from scontrol show hostnames."},
		&cli.IntFlag{Category: catHosts, Name: "fanout", Value: chain.DefaultFanout, Usage: "start at most `N` remote sides at once"},
		&cli.StringFlag{Category: catHosts, Name: "stats-json", Usage: "write the result, each host's too, as JSON to `FILE`"},
		&cli.BoolFlag{Name: "remote-receive", Hidden: true, Usage: "run as the remote side of an upload (started by rdmacp over ssh)"},
		&cli.BoolFlag{Name: "remote-send", Hidden: true, Usage: "run as the remote side of a download (started by rdmacp over ssh)"},
	), filterFlags()...)
}

// Flag categories, in the order help shows them.
const (
	catCopy   = "Copying"
	catKeep   = "What a tree keeps (with -r)"
	catIncr   = "A second copy, as rsync's"
	catFilter = "Filters, as rsync's"
	catSSH    = "ssh and launchers"
	catData   = "The stream"
	catHosts  = "Several hosts (--to)"
)

// filterFlags are rsync's include and exclude flags (see package filter),
// which all add to one list of rules, in the command line's order: the
// sending side leaves out what they exclude.
func filterFlags() []cli.Flag {
	rs := &filter.Rules{}
	flag := func(name, usage string, add func(*filter.Rules, string) error) cli.Flag {
		return &cli.GenericFlag{Category: catFilter, Name: name, Value: &filter.Flag{Rules: rs, Add: add}, Usage: usage + "\nRepeatable; the first rule that matches a path decides, as in rsync."}
	}
	return []cli.Flag{
		flag("exclude", "leave out what `PATTERN` matches\nrsync's rules: a leading / anchors at the sources' parent, a trailing / matches directories only, * does not cross a /, ** does; without a /, the last element at any depth.", (*filter.Rules).Exclude),
		flag("include", "do not leave out what `PATTERN` matches", (*filter.Rules).Include),
		flag("exclude-from", "--exclude each pattern of `FILE`, one a line\n- for stdin; \"+ PATTERN\" includes.", (*filter.Rules).ExcludeFrom),
		flag("include-from", "--include each pattern of `FILE`, one a line\n- for stdin; \"- PATTERN\" excludes.", (*filter.Rules).IncludeFrom),
		flag("filter", "add the filter `RULE`: - PATTERN, + PATTERN, merge FILE\n\"- PATTERN\", \"+ PATTERN\" (or exclude, include), \"merge FILE\" (or . FILE: its lines are rules) or \"clear\" (!); no modifiers, dir-merge, hide, show, protect or risk.", (*filter.Rules).Filter),
	}
}

// filterOf returns the rules that filterFlags gathered.
func filterOf(c *cli.Context) *filter.Rules {
	return c.Generic("exclude").(*filter.Flag).Rules
}

// defaultTimeout is --timeout's default, as rdmasend's.
const defaultTimeout = 60 * time.Second

// remoteSide returns the remote side's body that the hidden flags ask
// for, or nil.
func remoteSide(c *cli.Context) func(context.Context, io.Reader, io.Writer, io.Writer) int {
	switch {
	case c.Bool("remote-receive"):
		return Serve
	case c.Bool("remote-send"):
		return ServeSend
	}
	return nil
}

// copyAction is the local side's body: an upload when the last argument
// is [user@]HOST:DST, else a download from [user@]HOST:SRC... to a local
// DST.
func copyAction(c *cli.Context) error {
	if c.Bool("compress") {
		return command.Usagef("-z: rdmacp does not compress: an RDMA link carries more than a compressor makes (zstd: about 0.5 GB/s a core against 12 GB/s for 100 Gb/s), so it would only slow the copy; over a slow link compress the stream yourself: tar -cf - DIR | zstd | rdmasend HOST, and on HOST rdmarecv | zstd -d | tar -xf -")
	}
	if c.NArg() < 2 {
		return command.Usagef("expected SRC... [user@]HOST:DST or [user@]HOST:SRC... DST, got %d arguments (see --help)", c.NArg())
	}
	args := c.Args().Slice()
	srcs, last := args[:len(args)-1], args[len(args)-1]
	hosts, err := toHosts(c, srcs, last)
	if err != nil {
		return err
	}
	t, upErr := remote.ParseTarget(last)
	var from []remote.Target
	switch {
	case upErr != nil && hosts == nil:
		if from, err = remoteSources(srcs, last); err != nil {
			return err
		}
	default:
		if from, err = upSources(srcs, last); err != nil {
			return err
		}
	}
	o, err := optionsOf(c)
	if err != nil {
		return err
	}
	if o.Stats != "" && hosts == nil {
		return command.Usagef("--stats-json goes with --to or --to-file")
	}
	if o.SSH, err = sshCommand(c); err != nil {
		return err
	}
	if o.Launcher, err = launcher(c, append(from, t)); err != nil {
		return err
	}
	if hosts != nil {
		if o.Launcher != nil {
			if err := launchable(hosts); err != nil {
				return err
			}
		}
		if o.Resume || o.DataHost != "" {
			return command.Usagef("--to and --to-file do not go with --resume or --data-host (each host's stream goes to the address its name resolves to)")
		}
	}
	between := from != nil && upErr == nil
	if hosts != nil || between {
		if err := o.hostsOnly(); err != nil {
			return err
		}
		o.Progress = false // this host sees no stream, or, with --to, does not show its own
	}
	ctx, stop := command.SignalContext(syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch {
	case hosts != nil && from != nil:
		return BetweenTo(ctx, from, hosts, o)
	case hosts != nil:
		return CopyTo(ctx, srcs, hosts, o)
	case between:
		return Between(ctx, from, t, o)
	case from != nil:
		return Fetch(ctx, from, last, o)
	}
	return Copy(ctx, srcs, t, o)
}

// optionsOf returns the local side's settings that c's flags give, but
// for the ssh command and the launcher.
func optionsOf(c *cli.Context) (Options, error) {
	o := Options{
		Recursive: c.Bool("recursive"),
		Preserve:  c.Bool("preserve"),
		Keep:      keepFlags(c),
		Encrypt:   !c.Bool("no-encrypt"),
		Resume:    c.Bool("resume"),
		Command:   remote.Command{RemoteCmd: c.String("remote-cmd")},
		DataHost:  c.String("data-host"),
		Transport: c.String("transport"),
		Timeout:   c.Duration("timeout"),
		Verbose:   c.Bool("verbose"),
		Redraw:    progress.Terminal(os.Stderr),
		Stderr:    os.Stderr,
		Fanout:    c.Int("fanout"),
		Stats:     c.String("stats-json"),
		Filter:    filterOf(c),
	}
	o.Progress = c.Bool("progress") || o.Verbose && o.Redraw
	var err error
	if o.LimitRate, err = command.LimitRateOf(c, "rdmacp", os.Stderr); err != nil {
		return o, err
	}
	if c.IsSet("data-ports") {
		if o.DataPorts, err = proto.ParsePorts(c.String("data-ports")); err != nil {
			return o, command.Usagef("--data-ports: %v", err)
		}
	}
	if o.Fanout < 1 {
		return o, command.Usagef("--fanout %d: must be 1 or more", o.Fanout)
	}
	if o.Window, err = userWindow(c, o.Transport); err != nil {
		return o, err
	}
	if err := proto.CheckSettings(o.Transport, o.Timeout); err != nil {
		return o, command.Usagef("--%v", err)
	}
	return o, incrementalOf(c, &o, os.Stdout)
}

// keepFlags returns what c's flags ask an archive to keep besides data,
// modes and times.
func keepFlags(c *cli.Context) meta.Flags {
	return meta.Flags{Links: c.Bool("hard-links"), Xattrs: c.Bool("xattrs"), ACLs: c.Bool("acls"), Owner: c.Bool("owner"),
		Group: c.Bool("group"), Devices: c.Bool("devices"), NumericIDs: c.Bool("numeric-ids")}
}

// userWindow returns the chunk size and depth this side proposes when
// --chunk-size or --depth is given (see window.Choose), or zero Params
// when neither is.
func userWindow(c *cli.Context, transport string) (conn.Params, error) {
	if !c.IsSet("chunk-size") && !c.IsSet("depth") {
		return conn.Params{}, nil
	}
	f, err := command.WindowOf(c)
	if err != nil {
		return conn.Params{}, err
	}
	t := transportOf(transport, nil)
	return window.Choose(window.ThisHost(), f, window.Either(t.Pins(false), t.Pins(true))).Params(), nil
}

// remoteSources parses a download's sources to the local dst:
// [user@]HOST:SRC each, all on the same host as the same user.
func remoteSources(args []string, dst string) ([]remote.Target, error) {
	var ts []remote.Target
	for i, a := range args {
		t, err := remote.ParseTarget(a)
		switch {
		case err != nil && i == 0:
			return nil, command.Usagef("expected SRC... [user@]HOST:DST (to copy there) or [user@]HOST:SRC... DST (to copy from there): neither %q nor %q names a host", a, dst)
		case err != nil:
			return nil, command.Usagef("%q: to copy from a host, every source must be [user@]HOST:SRC", a)
		}
		if len(ts) > 0 && !t.SameHost(ts[0]) {
			return nil, command.Usagef("the sources %s:... and %s:... are on different hosts: copy from one host at a time", ts[0].SSHDest(), t.SSHDest())
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// upSources returns the sources of a copy to the remote dst: none if
// they are all on this host (an upload), else all on one remote host (a
// copy between two remote hosts, see Between).
func upSources(srcs []string, dst string) ([]remote.Target, error) {
	if _, err := remote.ParseTarget(srcs[0]); err == nil {
		return remoteSources(srcs, dst)
	}
	for _, s := range srcs {
		if _, err := remote.ParseTarget(s); err == nil {
			return nil, command.Usagef("%s: the sources are all on this host or all on one remote host (write ./%s for a local file)", s, s)
		}
	}
	return nil, nil
}

// toHosts returns the hosts of --to and --to-file, each with dst as its
// path, or nil without those flags.
func toHosts(c *cli.Context, srcs []string, dst string) ([]remote.Target, error) {
	list := c.StringSlice("to")
	if f := c.String("to-file"); f != "" {
		text, err := readHostFile(f)
		if err != nil {
			return nil, command.Usagef("--to-file: %w", err)
		}
		list = append(list, text)
	}
	if !c.IsSet("to") && !c.IsSet("to-file") {
		return nil, nil
	}
	if _, err := remote.ParseTarget(dst); err == nil {
		return nil, command.Usagef("with --to, DST is a path on each host, not [user@]HOST:DST (%q)", dst)
	}
	hosts, err := parseHosts(list, dst)
	if err != nil {
		return nil, command.Usagef("--to: %v", err)
	}
	return hosts, nil
}

// readHostFile reads a --to-file: the named file, or stdin for "-".
func readHostFile(name string) (string, error) {
	if name == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, maxHostFile+1))
		if len(b) > maxHostFile {
			return "", fmt.Errorf("stdin: more than %d bytes", maxHostFile)
		}
		return string(b), err
	}
	fi, err := os.Stat(name)
	if err != nil {
		return "", err
	}
	if fi.Size() > maxHostFile {
		return "", fmt.Errorf("%s: more than %d bytes", name, maxHostFile)
	}
	b, err := os.ReadFile(name)
	return string(b), err
}

// launcher returns --launcher's words, or nil without it; ts are the
// hosts of the copy, which must not name a user (the launcher's own
// settings choose it), and ssh's flags do not go with it.
func launcher(c *cli.Context, ts []remote.Target) ([]string, error) {
	words := strings.Fields(c.String("launcher"))
	if len(words) == 0 {
		return nil, nil
	}
	for _, f := range []string{"ssh-port", "identity", "ssh-config", "jump", "ssh-option", "data-host"} {
		if c.IsSet(f) {
			return nil, command.Usagef("--%s is for ssh: it does not go with --launcher", f)
		}
	}
	if err := launchable(ts); err != nil {
		return nil, err
	}
	return words, nil
}

// launchable checks that no host of ts names a user, which a launcher
// has no way to take.
func launchable(ts []remote.Target) error {
	for _, t := range ts {
		if t.User != "" {
			return command.Usagef("%s: a launcher starts the remote side as its own user: name the host alone", t.SSHDest())
		}
		if t.Port != 0 {
			return command.Usagef("%s: a launcher does not take an ssh port (scp://HOST:%d)", t.Host, t.Port)
		}
	}
	return nil
}

// sshCommand is the ssh command line from --ssh and the scp-like flags.
func sshCommand(c *cli.Context) ([]string, error) {
	cmd := strings.Fields(c.String("ssh"))
	if len(cmd) == 0 {
		return nil, command.Usagef("--ssh is empty")
	}
	if p := c.Int("ssh-port"); p < 0 || p > 65535 {
		return nil, command.Usagef("--ssh-port %d: must be 1 to 65535", p)
	} else if p != 0 {
		cmd = append(cmd, "-p", fmt.Sprint(p))
	}
	for _, f := range []struct{ flag, opt string }{{"identity", "-i"}, {"ssh-config", "-F"}, {"jump", "-J"}} {
		if v := c.String(f.flag); v != "" {
			cmd = append(cmd, f.opt, v)
		}
	}
	for _, o := range c.StringSlice("ssh-option") {
		cmd = append(cmd, "-o", o)
	}
	return cmd, nil
}
