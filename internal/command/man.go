package command

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// manPage renders app's man page (roff, section 1) from the definitions
// --help prints from: the name and usage, the usage text as the synopsis,
// the description, and the visible flags by category, each with the
// whole of its usage where --help has its first line. It is this package's own because urfave/cli's (App.ToMan) costs
// every start of every command the init of go-md2man and blackfriday;
// `make build` leaves those out with urfave/cli's urfave_cli_no_docs tag.
func manPage(app *cli.App) string {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH %s 1\n.SH NAME\n%s \\- %s\n", roff(app.Name), roff(app.Name), roff(app.Usage))
	if app.UsageText != "" {
		b.WriteString(".SH SYNOPSIS\n.nf\n")
		for _, l := range strings.Split(strings.TrimSpace(app.UsageText), "\n") {
			b.WriteString(roffLine(strings.TrimSpace(l)) + "\n")
		}
		b.WriteString(".fi\n")
	}
	if d := strings.TrimSpace(app.Description); d != "" {
		b.WriteString(".SH DESCRIPTION\n")
		writeText(&b, d)
	}
	b.WriteString(".SH OPTIONS\n")
	for _, g := range groups(app) {
		if g.name != "" {
			fmt.Fprintf(&b, ".SS %s\n", roffLine(g.name))
		}
		for _, f := range g.flags {
			writeFlag(&b, f)
		}
	}
	return b.String()
}

// writeFlag writes one flag as a tagged paragraph: its names and
// placeholder, its summary and default as --help has them, then the rest
// of its usage, and the environment variables it is read from.
func writeFlag(b *strings.Builder, f cli.Flag) {
	fmt.Fprintf(b, ".TP\n\\fB%s\\fR\n%s\n", roff(flagTerm(f)), roffLine(summary(usage(f))+defaultNote(f)))
	if _, detail, ok := strings.Cut(usage(f), "\n"); ok {
		b.WriteString(".br\n")
		for _, l := range strings.Split(strings.ReplaceAll(detail, "`", ""), "\n") {
			b.WriteString(roffLine(l) + "\n")
		}
	}
	if d, ok := f.(cli.DocGenerationFlag); ok && len(d.GetEnvVars()) > 0 {
		fmt.Fprintf(b, "Read from %s when not given.\n", roff("$"+strings.Join(d.GetEnvVars(), " or $")))
	}
}

// writeText writes text as roff paragraphs: an empty line starts a new
// paragraph, and runs of indented lines (examples, tables) keep their
// layout.
func writeText(b *strings.Builder, text string) {
	verbatim := false
	for _, l := range strings.Split(text, "\n") {
		indented := strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")
		switch {
		case strings.TrimSpace(l) == "":
			if verbatim {
				b.WriteString(".fi\n")
				verbatim = false
			}
			b.WriteString(".PP\n")
			continue
		case indented && !verbatim:
			b.WriteString(".nf\n")
			verbatim = true
		case !indented && verbatim:
			b.WriteString(".fi\n")
			verbatim = false
		}
		b.WriteString(roffLine(l) + "\n")
	}
	if verbatim {
		b.WriteString(".fi\n")
	}
}

// roff escapes the backslashes of s for roff text; hyphens stay as they
// are, as in urfave/cli's page (and as the tests and users grep for them).
func roff(s string) string { return strings.ReplaceAll(s, `\`, `\e`) }

// roffLine is roff for a whole line: one that would start with a control
// character (. or ') starts with \& instead.
func roffLine(s string) string {
	s = roff(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
}
