package command

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// manPage renders app's man page (roff, section 1) from the definitions
// --help prints: the name and usage, the usage text as the synopsis, the
// description, and the visible flags by category, each as --help shows
// it. It is this package's own because urfave/cli's (App.ToMan) costs
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
	cats := app.VisibleFlagCategories()
	if len(cats) == 0 { // as --help: no category, the flags in their order
		for _, f := range app.VisibleFlags() {
			writeFlag(&b, f)
		}
	}
	for _, cat := range cats {
		if cat.Name() != "" {
			fmt.Fprintf(&b, ".SS %s\n", roffLine(cat.Name()))
		}
		for _, f := range cat.Flags() {
			writeFlag(&b, f)
		}
	}
	return b.String()
}

// writeFlag writes one flag as a tagged paragraph: the names and
// placeholder, then the usage and default, both as --help has them.
func writeFlag(b *strings.Builder, f cli.Flag) {
	term, desc, _ := strings.Cut(cli.FlagStringer(f), "\t")
	fmt.Fprintf(b, ".TP\n\\fB%s\\fR\n%s\n", roff(term), roffLine(desc))
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
