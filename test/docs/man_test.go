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

// helpFlag is a flag's line in --help: its names and placeholders, and
// its usage with the default.
var helpFlag = regexp.MustCompile(`^\s+(-\S.*?)\s{2,}(\S.*)$`)

// TestManSaysWhatHelpSays checks that each command's man page, the flag
// reference, holds every line of its --help: the description, examples and
// exit codes line by line, and each flag's names and its usage.
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
		man := unroff.Replace(string(out))
		flags := 0
		for _, line := range strings.Split(string(help), "\n") {
			want := strings.TrimSpace(line)
			if m := helpFlag.FindStringSubmatch(line); m != nil {
				want = m[1] + "\n" + m[2]
				flags++
			}
			switch want {
			case "", "NAME:", "USAGE:", "DESCRIPTION:", "GLOBAL OPTIONS:":
				continue
			}
			if !strings.Contains(man, want) {
				t.Errorf("%s --man lacks what --help says: %q", name, want)
			}
		}
		if flags < 10 {
			t.Errorf("%s --help: only %d flag lines found", name, flags)
		}
	}
}
