package command

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst returns args (args[0] is the program name) with the flags
// that follow an operand moved ahead of the operands, in their order, as
// GNU getopt does for scp and cp, so that `rdmacp h0:f --to h1,h2 dst`
// reads as `rdmacp --to h1,h2 h0:f dst`. Only flags of app are moved,
// with their value; after "--" nothing is, and an argument that is not
// one of app's flags (a name such as "-" or "-x", or the shell
// completion's flag at the end) stays where it is.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range append([]cli.Flag{cli.HelpFlag}, app.Flags...) {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	flags, operands := []string{args[0]}, []string(nil)
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			flags = append(flags, args[i:i+1]...)
			operands = append(operands, args[i+1:]...)
			break
		}
		value, ok := flagValue(a, takesValue, app.UseShortOptionHandling)
		if !ok {
			operands = append(operands, a)
			continue
		}
		flags = append(flags, a)
		if value && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(flags, operands...)
}

// flagValue says whether a is one of the flags of takesValue (its names,
// each true if the flag takes a value) and whether its value is the next
// argument; with shortCombined, "-rp" is the flags r and p.
func flagValue(a string, takesValue map[string]bool, shortCombined bool) (next, ok bool) {
	name, inline := strings.CutPrefix(a, "--")
	if !inline {
		name, ok = strings.CutPrefix(a, "-")
		if !ok || name == "" {
			return false, false
		}
	}
	name, _, hasValue := strings.Cut(name, "=")
	if v, ok := takesValue[name]; ok {
		return v && !hasValue, true
	}
	if inline || !shortCombined || hasValue {
		return false, false
	}
	for _, c := range name {
		if v, ok := takesValue[string(c)]; !ok || v {
			return false, false
		}
	}
	return false, true
}
