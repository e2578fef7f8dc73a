// Package cp is the rdmacp command: the local side, which plans the copy,
// starts the remote side over ssh, hands it a one-time key and streams the
// files (one as is, several as a tar archive), and the remote side, which
// listens, receives through the engine and puts the files in place.
package cp

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/urfave/cli/v2"
)

// help is the description in rdmacp --help.
const help = `Copies files and directories to HOST like scp, with the data on an RDMA connection
(or TCP where there is no RDMA path) instead of inside ssh. rdmacp logs in with the
system's ssh (your ~/.ssh/config, keys, agent and jump hosts apply) and starts
"rdmacp --remote-receive" there, which must be installed on HOST. Over the ssh
channel it passes a one-time random key (never on a command line); the remote side
listens on a port of the system's choice, on the address the ssh connection arrived
on (or --data-host's), and reports it back; rdmacp connects to HOST on it (trying
again for up to 15 s if refused or reset before the stream starts) and streams. Every byte is checked (length and a MAC under the one-time
key) and rdmacp exits 0 only when the remote side has written everything and put it
in place. The remote side exits when the stream or the ssh session ends.

One regular file travels as is and lands in DST (or DST/NAME when DST is a directory),
written to a temporary name and renamed into place on success. With -r, directories
(and several sources) travel as one tar archive, with permission bits (less the
remote umask and without setuid and setgid, unless -p) and modification times,
symbolic links as links; DST must be a directory, or, for one source, a new name in
an existing directory. A file or link in the way is replaced, never written through;
a directory or device in the way is refused and kept. The holes of sparse files
(found with SEEK_DATA/SEEK_HOLE) are not sent, and stay holes at the destination.

The data connection goes straight to HOST (the HostName of an ssh alias), not
through ssh or a jump host: use --data-host to name another address, e.g. that of the
host's InfiniBand interface.

EXAMPLES:
   rdmacp weights.bin node2:/data/             # one file into a directory
   rdmacp -p image.qcow2 alice@node2:vm.qcow2  # keep mode and times; DST relative to home
   rdmacp -r dataset/ node2:/scratch/          # a directory tree
   rdmacp -r a b c.txt node2:/scratch/in/      # several sources into a directory
   rdmacp -v --data-host 10.10.0.2 big node2:  # ssh to node2, stream to its IB address
   rdmacp -J gw -i ~/.ssh/lab big node2:/tmp/  # ssh options as in scp
   rdmacp --ssh "ssh -F ./ssh_config" f h:/tmp # any ssh command (also RDMACP_SSH)

EXIT CODES:
   0  success: every byte was delivered and written, and the copy is in place
   1  internal error
   2  usage error (bad flags or arguments, a source missing)
   3  setup failure: ssh or the remote side could not start, DST missing, cannot connect
   4  stream aborted: the peer aborted or was lost, interrupted, input or output failed
   5  integrity failure: length, checksum or sequence mismatch
   6  authentication failure (the one-time key did not match)
   7  RDMA requested (--transport rdma) but not available`

// Main runs the rdmacp command with args (args[0] is the program name)
// and returns its exit code.
func Main(args []string) int {
	code := 0
	a := &cli.App{
		Name:                   "rdmacp",
		Usage:                  "copy files and directories to another host over RDMA (or TCP), set up through ssh",
		UsageText:              "rdmacp [-r] [-p] [flags] SRC... [user@]HOST:DST",
		Description:            help,
		HideHelpCommand:        true,
		UseShortOptionHandling: true,
		Flags: append(command.DocFlags(),
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r"}, Usage: "copy directories, as a tar archive"},
			&cli.BoolFlag{Name: "preserve", Aliases: []string{"p"}, Usage: "keep modes exactly, setuid, setgid and sticky too (else less the remote umask, without those), and a single file's times (directory copies always keep times)"},
			&cli.IntFlag{Name: "ssh-port", Aliases: []string{"P"}, Usage: "ssh port on HOST (ssh -p)"},
			&cli.StringFlag{Name: "identity", Aliases: []string{"i"}, Usage: "ssh identity `FILE` (ssh -i)"},
			&cli.StringFlag{Name: "ssh-config", Aliases: []string{"F"}, Usage: "ssh config `FILE` (ssh -F)"},
			&cli.StringFlag{Name: "jump", Aliases: []string{"J"}, Usage: "ssh jump host (ssh -J); the stream itself still goes straight to HOST"},
			&cli.StringSliceFlag{Name: "ssh-option", Aliases: []string{"o"}, Usage: "ssh option, e.g. -o ConnectTimeout=5 (repeatable)"},
			&cli.StringFlag{Name: "ssh", Value: "ssh", EnvVars: []string{"RDMACP_SSH"}, Usage: "the ssh command, split at spaces (e.g. \"ssh -F cfg\")"},
			&cli.StringFlag{Name: "remote-cmd", Value: "rdmacp", EnvVars: []string{"RDMACP_REMOTE_CMD"}, Usage: "rdmacp on HOST, as its shell runs it (e.g. /opt/bin/rdmacp)"},
			&cli.StringFlag{Name: "data-host", Usage: "connect the stream to this address instead of HOST"},
			&cli.StringFlag{Name: "transport", Aliases: []string{"t"}, Value: "auto", Usage: "auto (RDMA when a device can reach HOST, else TCP), rdma or tcp"},
			&cli.DurationFlag{Name: "timeout", Value: defaultTimeout, Usage: "give up when the peer has been silent this long (0: never)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print a summary line: bytes, seconds, rate, transport"},
			&cli.BoolFlag{Name: "remote-receive", Hidden: true, Usage: "run as the remote side (started by rdmacp over ssh)"},
		),
		OnUsageError: command.OnUsageError,
		Action: func(c *cli.Context) error {
			if handled, err := command.Docs(c, os.Stdout); handled {
				return err
			}
			if c.Bool("remote-receive") {
				ctx, stop := command.SignalContext(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
				defer stop()
				code = Serve(ctx, os.Stdin, os.Stdout, os.Stderr)
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

// defaultTimeout is --timeout's default, as rdmasend's.
const defaultTimeout = 60 * time.Second

// copyAction is the local side's body.
func copyAction(c *cli.Context) error {
	if c.NArg() < 2 {
		return command.Usagef("expected SRC... [user@]HOST:DST, got %d arguments (see --help)", c.NArg())
	}
	args := c.Args().Slice()
	t, err := ParseTarget(args[len(args)-1])
	if err != nil {
		return err
	}
	o := Options{
		Recursive: c.Bool("recursive"),
		Preserve:  c.Bool("preserve"),
		RemoteCmd: c.String("remote-cmd"),
		DataHost:  c.String("data-host"),
		Transport: c.String("transport"),
		Timeout:   c.Duration("timeout"),
		Verbose:   c.Bool("verbose"),
		Stderr:    os.Stderr,
	}
	if err := checkSettings(o.Transport, o.Timeout); err != nil {
		return command.Usagef("--%v", err)
	}
	if o.SSH, err = sshCommand(c); err != nil {
		return err
	}
	ctx, stop := command.SignalContext(syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return Copy(ctx, args[:len(args)-1], t, o)
}

// sshCommand is the ssh command line from --ssh and the scp-like flags.
func sshCommand(c *cli.Context) ([]string, error) {
	cmd := strings.Fields(c.String("ssh"))
	if len(cmd) == 0 {
		return nil, command.Usagef("--ssh is empty")
	}
	if p := c.Int("ssh-port"); p != 0 {
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
