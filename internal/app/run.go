package app

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// runApp runs a command and turns its error into a message and exit code.
func runApp(app *cli.App, args []string) int {
	app.Writer, app.ErrWriter = os.Stderr, os.Stderr
	err := app.Run(args)
	return report(os.Stderr, app.Name, err)
}

// onUsageError turns a flag parsing error into a usage error.
func onUsageError(_ *cli.Context, err error, _ bool) error {
	return usagef("%v (see --help)", err)
}

// finish prints the -v summary and writes --stats-json for a stream that
// ended with err, and returns err (or the stats file's error).
func finish(o options, role string, st pipe.Stats, err error) error {
	s := newSummary(role, st, err)
	if o.verbose && err == nil {
		fmt.Fprintf(os.Stderr, "rdma%s: %s\n", role, s.line())
	}
	if o.statsJSON != "" {
		if werr := s.writeJSON(o.statsJSON); werr != nil && err == nil {
			return pipe.Errorf(pipe.KindUsage, "", "%v", werr)
		}
	}
	return err
}
