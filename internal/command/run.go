package command

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Hint returns what the user of command name can do about err, in the
// command's own flags, or "".
type Hint func(name string, err error) string

// Run runs app with args (args[0] is the program name; flags may follow
// operands, see flagsFirst), prints the error it
// ends with, and the hint for it, on stderr, and returns the exit code.
// --help goes to stdout (exit 0), so that `rdmasend --help | less` shows
// it; errors, usage errors (exit 2) among them, go to stderr. A panic is a
// bug: it exits 1 (internal error) with the stack, not with the Go
// runtime's 2, which is the usage error's code here. A command line that
// the completion scripts end with completionFlag prints the flags its
// last word may begin, and nothing of it is parsed. hint may be nil.
// urfave/cli's own flag handling runs as is (its flag actions cost a start
// about 0.25 ms with rdmasend's ~40 flags, an accepted cost).
func Run(app *cli.App, args []string, hint Hint) int {
	return run(app, args, hint, os.Stdout, os.Stderr)
}

// run is Run with its standard output and error.
func run(app *cli.App, args []string, hint Hint, stdout, stderr io.Writer) (code int) {
	app.Writer, app.ErrWriter = stdout, stderr
	// -h is the commands' own HelpFlag: urfave/cli prints the help text of
	// this package (a template that is all text) when it is set.
	app.HideHelp = true
	app.CustomAppHelpTemplate = strings.ReplaceAll(help(app), "{{", `{{"{{"}}`)
	if word, ok := completing(args); ok {
		return report(stderr, app.Name, complete(stdout, app, word), nil)
	}
	defer func() {
		if p := recover(); p != nil {
			code = report(stderr, app.Name, conn.Errorf(conn.KindInternal, "", "bug: %v (please report it with this message)\n%s", p, debug.Stack()), hint)
		}
	}()
	return report(stderr, app.Name, app.Run(flagsFirst(app, args)), hint)
}

// OnUsageError turns a flag parsing error into a usage error (a
// cli.App's OnUsageError).
func OnUsageError(_ *cli.Context, err error, _ bool) error {
	return Usagef("%v (see --help)", err)
}

// Early handles the flags that print something and exit instead of
// running the command: --version, --completion and --man (--help is
// urfave/cli's, with this package's text: see run). handled is false when
// none was given.
func Early(c *cli.Context, out io.Writer) (handled bool, err error) {
	if c.Bool("version") {
		_, err := fmt.Fprintln(out, version(c.App.Name))
		return true, err
	}
	return Docs(c, out)
}
