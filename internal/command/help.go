package command

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// helpWidth is the widest line --help prints.
const helpWidth = 80

// helpIndent is the column where a flag's summary starts in --help.
const helpIndent = 26

// HelpFlag is -h, --help, which prints the app's short help (see help and
// run).
func HelpFlag() cli.Flag {
	return &cli.BoolFlag{Name: "help", Aliases: []string{"h"}, Usage: "print this help and exit"}
}

// help is app's --help: the synopsis, what it does, each visible flag on
// a line of its group (in the order the flags are defined) with its
// summary and default, and where the whole reference is (the man page,
// which holds the description, examples and exit codes too). No line is
// wider than helpWidth.
func help(app *cli.App) string {
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimSpace(app.UsageText), "\n") {
		lead := "Usage: "
		if i > 0 {
			lead = "       "
		}
		b.WriteString(wrap(lead+strings.TrimSpace(l), len(lead)+len(app.Name)+1))
	}
	b.WriteString(wrap(upperFirst(app.Usage)+".", 0))
	for _, g := range groups(app) {
		if g.name != "" {
			fmt.Fprintf(&b, "\n%s:\n", g.name)
		} else {
			b.WriteString("\n")
		}
		for _, f := range g.flags {
			b.WriteString(helpLine(f))
		}
	}
	fmt.Fprintf(&b, "\nThe whole reference, with examples and exit codes: man %s\n", app.Name)
	return b.String()
}

// helpLine is f's entry in --help: its names and placeholder, then from
// helpIndent on its summary and default, wrapped.
func helpLine(f cli.Flag) string {
	term := "  " + flagTerm(f)
	text := summary(usage(f)) + defaultNote(f)
	if len(term)+2 > helpIndent {
		return term + "\n" + wrap(strings.Repeat(" ", helpIndent)+text, helpIndent)
	}
	return wrap(term+strings.Repeat(" ", helpIndent-len(term))+text, helpIndent)
}

// wrap breaks line at spaces so that no piece is wider than helpWidth,
// each piece after the first indented by indent spaces, and ends each
// with a newline.
func wrap(line string, indent int) string {
	var b strings.Builder
	for len(line) > helpWidth {
		cut := strings.LastIndex(line[:helpWidth+1], " ")
		if cut <= indent {
			break // one word wider than the line: left whole
		}
		b.WriteString(strings.TrimRight(line[:cut], " ") + "\n")
		line = strings.Repeat(" ", indent) + strings.TrimLeft(line[cut:], " ")
	}
	b.WriteString(line + "\n")
	return b.String()
}

// upperFirst is s with its first letter in upper case.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// A group is the flags of one category, in the order they are defined.
type group struct {
	name  string
	flags []cli.Flag
}

// groups are app's visible flags by category, the categories in the order
// of their first flag; a flag without one (--help, --version) joins the
// first.
func groups(app *cli.App) []group {
	var gs []group
	var loose []cli.Flag
	at := map[string]int{}
	for _, f := range visibleFlags(app) {
		cat := ""
		if c, ok := f.(cli.CategorizableFlag); ok {
			cat = c.GetCategory()
		}
		if cat == "" {
			loose = append(loose, f)
			continue
		}
		i, ok := at[cat]
		if !ok {
			i = len(gs)
			at[cat] = i
			gs = append(gs, group{name: cat})
		}
		gs[i].flags = append(gs[i].flags, f)
	}
	if len(gs) == 0 {
		return []group{{flags: loose}}
	}
	gs[0].flags = append(loose, gs[0].flags...)
	return gs
}

// flagTerm is f's names as typed, letters first, and its placeholder if
// it takes a value: "-P, --port N".
func flagTerm(f cli.Flag) string {
	var short, long []string
	for _, n := range f.Names() {
		if len(n) == 1 {
			short = append(short, dashed(n))
		} else {
			long = append(long, dashed(n))
		}
	}
	term := strings.Join(append(short, long...), ", ")
	if p := placeholder(f); p != "" {
		term += " " + p
	}
	return term
}

// placeholder is the name of f's value: the word its usage puts in
// backquotes, else one for its type; "" for a flag without a value.
func placeholder(f cli.Flag) string {
	d, ok := f.(cli.DocGenerationFlag)
	if !ok || !d.TakesValue() {
		return ""
	}
	if _, rest, ok := strings.Cut(d.GetUsage(), "`"); ok {
		if name, _, ok := strings.Cut(rest, "`"); ok {
			return name
		}
	}
	switch f.(type) {
	case *cli.IntFlag:
		return "N"
	case *cli.DurationFlag:
		return "DURATION"
	case *cli.StringSliceFlag:
		return "LIST"
	}
	return "VALUE"
}

// defaultNote is " (default: X)" for a flag whose default says something,
// "" for one without (false, 0, an empty string).
func defaultNote(f cli.Flag) string {
	d, ok := f.(cli.DocGenerationFlag)
	if !ok || !d.TakesValue() {
		return ""
	}
	v := strings.Trim(d.GetDefaultText(), `"`)
	if df, ok := f.(*cli.DurationFlag); ok && df.DefaultText == "" {
		v = shortDuration(v)
	}
	switch v {
	case "", "0", "0s", "[]":
		return ""
	}
	return " (default: " + v + ")"
}

// shortDuration drops the zero units that time.Duration's String ends
// with: 1m0s is 1m, 2h0m0s is 2h.
func shortDuration(s string) string {
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
