package command

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// completionFlag ends the command line that the bash and zsh completion
// scripts run to ask for the candidates of the word before it.
const completionFlag = "--generate-bash-completion"

// completing says whether args (args[0] is the program name) ask for
// completions, and for which word: the one before completionFlag ("" if
// none).
func completing(args []string) (word string, ok bool) {
	n := len(args)
	if n < 2 || args[n-1] != completionFlag {
		return "", false
	}
	if n > 2 {
		word = args[n-2]
	}
	return word, true
}

// complete prints on w, one a line, the names of app's visible flags
// (-x for a letter, --name for a word) that begin with word. It parses
// nothing else of the command line, so that no word a user may type
// before it can make it fail.
func complete(w io.Writer, app *cli.App, word string) error {
	for _, f := range visibleFlags(app) {
		for _, n := range f.Names() {
			if name := dashed(n); strings.HasPrefix(name, word) {
				if _, err := fmt.Fprintln(w, name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// dashed is a flag's name as typed: -x for a letter, --name for a word.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// visibleFlags are app's flags that --help and the completions show, the
// help flag among them.
func visibleFlags(app *cli.App) []cli.Flag {
	var fs []cli.Flag
	if !app.HideHelp && cli.HelpFlag != nil {
		fs = append(fs, cli.HelpFlag)
	}
	for _, f := range app.Flags {
		if v, ok := f.(cli.VisibleFlag); !ok || v.IsVisible() {
			fs = append(fs, f)
		}
	}
	return fs
}
