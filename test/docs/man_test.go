package docs

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// unroff undoes what the man page generator escapes and marks up.
var unroff = strings.NewReplacer(`\-`, "-", `\fB`, "", `\fR`, "", `\fI`, "", `\e`, `\`, `\(aq`, "'", `\&`, "")

// helpFlag is a flag's line in --help: its names and placeholder, and the
// start of its summary with the default.
var helpFlag = regexp.MustCompile(`^  (-\S.*?)\s{2,}(\S.*)$`)

// TestManSaysWhatHelpSays checks that each command's man page, the flag
// reference, holds all that its --help says: the synopsis and the summary
// line, and each flag's names, placeholder, summary and default (the
// man page's words with their spacing and line breaks as one space).
func TestManSaysWhatHelpSays(t *testing.T) {
	for name := range ours {
		help, err := exec.Command(filepath.Join(bin, name), "--help").Output()
		if err != nil {
			t.Fatalf("%s --help: %v", name, err)
		}
		out, err := exec.Command(filepath.Join(bin, name), "--man").Output()
		if err != nil {
			t.Fatalf("%s --man: %v", name, err)
		}
		man := strings.Join(strings.Fields(unroff.Replace(regexp.MustCompile(`(?m)^\.(br|TP|PP|nf|fi|SS .*|SH .*)$`).ReplaceAllString(string(out), ""))), " ")
		flags := 0
		var want []string // what the man page must hold, each a run of words
		for _, line := range strings.Split(string(help), "\n") {
			switch m := helpFlag.FindStringSubmatch(line); {
			case m != nil:
				want = append(want, m[1], m[2])
				flags++
			case strings.HasPrefix(line, "                          "): // a summary's next line
				want[len(want)-1] += " " + strings.TrimSpace(line)
			case strings.HasPrefix(line, "  -"): // names too long to share a line
				want = append(want, strings.TrimSpace(line), "")
				flags++
			case strings.HasPrefix(line, "Usage: "), strings.HasPrefix(line, "       "):
				want = append(want, strings.TrimSpace(strings.TrimPrefix(line, "Usage: ")))
			}
		}
		for _, w := range want {
			if !strings.Contains(man, strings.Join(strings.Fields(w), " ")) {
				t.Errorf("%s --man lacks what --help says: %q", name, w)
			}
		}
		if flags < 10 {
			t.Errorf("%s --help: only %d flag lines found", name, flags)
		}
	}
}

// TestHelpFits checks that each command's --help is short and fits the
// terminal: no line wider than 80 columns, a synopsis first, the flags in
// groups, one default each, and a pointer to the man page at the end.
func TestHelpFits(t *testing.T) {
	for name := range ours {
		out, err := exec.Command(filepath.Join(bin, name), "--help").Output()
		if err != nil {
			t.Fatalf("%s --help: %v", name, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		for i, l := range lines {
			if n := len([]rune(l)); n > 80 {
				t.Errorf("%s --help line %d is %d columns wide: %q", name, i+1, n, l)
			}
		}
		groups := 0
		for _, l := range lines {
			if strings.HasSuffix(l, ":") && !strings.HasPrefix(l, " ") {
				groups++
			}
		}
		if !strings.HasPrefix(lines[0], "Usage: "+name+" ") || groups < 3 || lines[len(lines)-1] != "The whole reference, with examples and exit codes: man "+name {
			t.Errorf("%s --help: want a synopsis first, 3 groups or more (found %d), and the man page last:\n%s", name, groups, out)
		}
		entry := "" // one flag's lines, to count its defaults
		for _, l := range append(lines, "") {
			if strings.HasPrefix(l, "                          ") {
				entry += " " + l
				continue
			}
			if n := strings.Count(entry, "default"); n > 1 {
				t.Errorf("%s --help says a default %d times: %s", name, n, strings.Join(strings.Fields(entry), " "))
			}
			entry = l
		}
		if len(lines) > 100 {
			t.Errorf("%s --help is %d lines long", name, len(lines))
		}
	}
}
