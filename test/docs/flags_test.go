package docs

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A flagSpec maps each name of a command's flags, without dashes, to
// whether the flag takes a value.
type flagSpec map[string]bool

// optionLine is a flag's line in --help: two spaces, its names and
// placeholder ("-P, --port N"), two spaces or more, its summary.
var optionLine = regexp.MustCompile(`^  (-[^ ].*?)(?:\s{2,}|$)`)

// readSpec reads command name's flags from its --help, and the hidden
// ones every command has (command.DocFlags).
func readSpec(t *testing.T, name string) flagSpec {
	t.Helper()
	out, err := exec.Command(filepath.Join(bin, name), "--help").Output()
	if err != nil {
		t.Fatalf("%s --help: %v", name, err)
	}
	spec := flagSpec{"man": false, "completion": true}
	for _, line := range strings.Split(string(out), "\n") {
		m := optionLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		// -P, --port N: the placeholder follows the last name
		names, placeholder, _ := strings.Cut(strings.ReplaceAll(m[1], ", ", ","), " ")
		for _, part := range strings.Split(names, ",") {
			spec[strings.TrimLeft(part, "-")] = placeholder != ""
		}
	}
	if len(spec) < 10 {
		t.Fatalf("%s --help: found only %d flags", name, len(spec))
	}
	return spec
}

// classify splits args into flags (with their values) and operands as
// Go's flag package, which urfave/cli uses, would: flags stop at the first
// operand or at --. A flag after an operand is an error (the command would
// take it for an operand), and so is a flag the command does not have.
func (s flagSpec) classify(args []string) (flags, operands []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(operands) > 0 || a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			if strings.HasPrefix(a, "-") && len(a) > 1 && len(operands) > 0 {
				return nil, nil, fmt.Errorf("flag %s after the operand %q: it would be taken for an operand", a, operands[0])
			}
			if a != "--" {
				operands = append(operands, a)
			}
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takes, known := s[name]
		switch {
		case !known && s.shortBools(a):
			flags = append(flags, a)
		case !known:
			return nil, nil, fmt.Errorf("no flag %s", a)
		case takes && !hasValue:
			if i+1 == len(args) {
				return nil, nil, fmt.Errorf("flag %s without its value", a)
			}
			flags = append(flags, a, args[i+1])
			i++
		default:
			flags = append(flags, a)
		}
	}
	return flags, operands, nil
}

// shortBools reports whether a is several one-letter flags that take no
// value, run together (-rp), as rdmacp accepts them.
func (s flagSpec) shortBools(a string) bool {
	if strings.HasPrefix(a, "--") || len(a) < 3 {
		return false
	}
	for _, c := range a[1:] {
		if takes, ok := s[string(c)]; !ok || takes {
			return false
		}
	}
	return true
}
