package command

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Hint returns what the user of command name can do about err, in the
// command's own flags, or "".
type Hint func(name string, err error) string

// Run runs app with args (args[0] is the program name), prints the error it
// ends with, and the hint for it, on stderr, and returns the exit code. A
// panic is a bug: it exits 1 (internal error) with the stack, not with the
// Go runtime's 2, which is the usage error's code here. hint may be nil.
func Run(app *cli.App, args []string, hint Hint) (code int) {
	app.Writer, app.ErrWriter = os.Stderr, os.Stderr
	app.EnableBashCompletion = true
	skipFlagActions(app)
	defer func() {
		if p := recover(); p != nil {
			code = report(os.Stderr, app.Name, conn.Errorf(conn.KindInternal, "", "bug: %v (please report it with this message)\n%s", p, debug.Stack()), hint)
		}
	}()
	return report(os.Stderr, app.Name, app.Run(args), hint)
}

// skipFlagActions spares app's start urfave/cli v2's runFlagActions, which
// runs after Before and asks Context.IsSet for every name of every flag,
// each a search of all flags whose every name goes through a regexp
// (FlagNames): quadratic, about 0.25 ms of every start with the ~40 flags
// of rdmasend (issue 18). Only flags with an Action need it, so Before
// leaves only those in the root command's list, which runFlagActions
// walks; App.Flags, which help, lookups and IsSet use, stay whole.
func skipFlagActions(app *cli.App) {
	var actions []cli.Flag
	for _, f := range app.Flags {
		v := reflect.ValueOf(f)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			actions = append(actions, f) // not one of urfave/cli's: keep it
			continue
		}
		if a := v.Elem().FieldByName("Action"); a.IsValid() && a.Kind() == reflect.Func && !a.IsNil() {
			actions = append(actions, f)
		}
	}
	before := app.Before
	app.Before = func(c *cli.Context) error {
		c.Command.Flags = actions
		if before != nil {
			return before(c)
		}
		return nil
	}
}

// OnUsageError turns a flag parsing error into a usage error (a
// cli.App's OnUsageError).
func OnUsageError(_ *cli.Context, err error, _ bool) error {
	return Usagef("%v (see --help)", err)
}

// Early handles the flags that print something and exit instead of
// running the command: --version (where the command has it), --completion
// and --man. handled is false when none was given.
func Early(c *cli.Context, out io.Writer) (handled bool, err error) {
	if c.Bool("version") {
		_, err := fmt.Fprintln(out, version(c.App.Name))
		return true, err
	}
	return Docs(c, out)
}
