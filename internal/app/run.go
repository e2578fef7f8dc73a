package app

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// runApp runs a command and turns its error into a message and exit code.
// A panic is a bug: it exits 1 (internal error) with the stack, not with
// the Go runtime's 2, which is the usage error's code here.
func runApp(app *cli.App, args []string) (code int) {
	app.Writer, app.ErrWriter = os.Stderr, os.Stderr
	app.EnableBashCompletion = true
	defer func() {
		if p := recover(); p != nil {
			code = report(os.Stderr, app.Name, conn.Errorf(conn.KindInternal, "", "bug: %v (please report it with this message)\n%s", p, debug.Stack()))
		}
	}()
	err := app.Run(args)
	return report(os.Stderr, app.Name, err)
}

// early handles the flags that print something and exit instead of
// streaming: --version, --completion and --man. handled is false when
// none was given.
func early(c *cli.Context, out io.Writer) (handled bool, err error) {
	if c.Bool("version") {
		_, err := fmt.Fprintln(out, version(c.App.Name))
		return true, err
	}
	return Docs(c, out)
}

// onUsageError turns a flag parsing error into a usage error.
func onUsageError(_ *cli.Context, err error, _ bool) error {
	return usagef("%v (see --help)", err)
}

// finish prints the -v summary and writes --stats-json for a stream that
// ended with err, and returns err (or the stats file's error).
func finish(o options, role string, st pipe.Stats, err error) error {
	s := newSummary(role, st, err, cpuTime())
	if len(o.cfg.Chain) > 0 {
		s.Chain = o.cfg.Chain
		if err == nil {
			s.Receivers = st.Receivers
			for _, h := range append([]string{s.Remote}, o.cfg.Chain...) {
				s.Hosts = append(s.Hosts, hostResult{Host: h, OK: true, Bytes: st.Bytes})
			}
		}
	}
	if o.verbose && err == nil {
		fmt.Fprintf(os.Stderr, "rdma%s: %s\n", role, s.line())
	}
	if o.statsJSON != "" {
		if werr := s.writeJSON(o.statsJSON); werr != nil && err == nil {
			return conn.Errorf(conn.KindUsage, "", "%v", werr)
		}
	}
	return err
}
