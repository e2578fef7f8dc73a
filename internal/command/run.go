package command

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
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
// cli.App's OnUsageError), saying for a value that does not parse what
// its flag takes.
func OnUsageError(c *cli.Context, err error, _ bool) error {
	m := badValue.FindStringSubmatch(err.Error())
	if m == nil {
		return Usagef("%v (see --help)", err)
	}
	value, name := m[1], m[2]
	for _, f := range c.App.Flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		switch f.(type) {
		case *cli.DurationFlag:
			if _, err := strconv.ParseFloat(value, 64); err == nil {
				return Usagef("%s %s: a duration needs its unit: %ss, %sm, %sh", dashed(name), value, value, value, value)
			}
			return Usagef("%s %q: not a duration (examples: 30s, 5m, 1h30m)", dashed(name), value)
		case *cli.IntFlag:
			return Usagef("%s %q: not a whole number", dashed(name), value)
		}
	}
	return Usagef("%v (see --help)", err)
}

// badValue is the error of Go's flag package for a value that does not
// parse: the value and the flag's name.
var badValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): `)

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
