// Package docs tests what README.md and docs/*.md tell users to run: every
// command line of rdmasend, rdmarecv and rdmacp in their examples parses
// as the commands' own flag definitions say, and the short ones run over
// TCP on loopback and do what the text says.
package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// bin is the directory holding the commands TestMain built.
var bin string

func TestMain(m *testing.M) {
	dir, err := testutil.Commands(false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the commands:", err)
		os.Exit(2)
	}
	bin = dir
	os.Exit(m.Run())
}

// An example is one line of a ```sh block of the documentation.
type example struct {
	where string // file:line
	text  string // without a prompt (node2$ )
}

var prompt = regexp.MustCompile(`^[A-Za-z0-9_-]+\$ `)

// examples returns every line of the ```sh blocks of README.md and
// docs/*.md.
func examples(t *testing.T) []example {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []example
	for _, name := range append([]string{"../../README.md"}, files...) {
		out = append(out, shBlocks(t, name)...)
	}
	if len(out) < 20 {
		t.Fatalf("found only %d example lines: the documentation lost its ```sh blocks?", len(out))
	}
	return out
}

// shBlocks returns the lines of file's ```sh blocks.
func shBlocks(t *testing.T, file string) []example {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []example
	in := false
	s := bufio.NewScanner(f)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		switch {
		case strings.HasPrefix(line, "```"):
			in = line == "```sh"
		case in && line != "" && !strings.HasPrefix(line, "#"):
			out = append(out, example{fmt.Sprintf("%s:%d", strings.TrimPrefix(file, "../../"), n), prompt.ReplaceAllString(line, "")})
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ours are the commands whose examples are checked.
var ours = map[string]bool{"rdmasend": true, "rdmarecv": true, "rdmacp": true}

// TestExamplesParse checks every example's rdmasend, rdmarecv and rdmacp
// command: each flag is one of the command's own, each value parses (the
// command given the same flags and --help exits 0), the flags come before
// the operands (the commands stop parsing flags at the first operand),
// and the operands are as many as the command takes.
func TestExamplesParse(t *testing.T) {
	specs := map[string]flagSpec{}
	checked := map[string]int{}
	for _, ex := range examples(t) {
		cmds, err := commands(ex.text)
		if err != nil {
			t.Errorf("%s: %v: %s", ex.where, err, ex.text)
			continue
		}
		for _, c := range cmds {
			if !ours[c.name] {
				continue
			}
			if specs[c.name] == nil {
				specs[c.name] = readSpec(t, c.name)
			}
			if err := checkCommand(specs[c.name], c); err != nil {
				t.Errorf("%s: %s: %v", ex.where, ex.text, err)
			}
			checked[c.name]++
		}
	}
	for name := range ours {
		if checked[name] == 0 {
			t.Errorf("no example of %s found", name)
		}
	}
	t.Logf("checked %v example commands", checked)
}

// checkCommand checks c against its flags and runs it with --help.
func checkCommand(spec flagSpec, c command) error {
	flags, operands, err := spec.classify(c.args)
	if err != nil {
		return err
	}
	if err := operandCount(c.name, flags, operands); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(bin, c.name), append(flags, "--help")...)
	if cmd.Dir, err = readFiles(flags); err != nil {
		return err
	}
	defer os.RemoveAll(cmd.Dir)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		return fmt.Errorf("%s %s --help: %v: %s", c.name, strings.Join(flags, " "), err, msg)
	}
	if !strings.Contains(string(out), "Usage: ") {
		return fmt.Errorf("%s --help printed no usage on stdout", c.name)
	}
	return nil
}

// readFiles makes a scratch directory to run a command in, holding an
// empty file for each file its flags read as they are parsed (rdmacp's
// filter rules: --exclude-from, --include-from, a merge rule).
func readFiles(flags []string) (string, error) {
	dir, err := os.MkdirTemp("", "rdmapipe-examples")
	if err != nil {
		return "", err
	}
	for i, f := range flags {
		name := ""
		switch {
		case (f == "--exclude-from" || f == "--include-from") && i+1 < len(flags):
			name = flags[i+1]
		case f == "--filter" && i+1 < len(flags):
			if rule, ok := strings.CutPrefix(flags[i+1], "merge "); ok {
				name = rule
			}
		}
		if name != "" && name != "-" {
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

// operandCount checks that command name takes as many operands as it got.
func operandCount(name string, flags, operands []string) error {
	broadcast := false
	for _, f := range flags {
		broadcast = broadcast || f == "--to" || f == "--to-file" || strings.HasPrefix(f, "--to=")
	}
	var ok bool
	switch name {
	case "rdmasend":
		ok = len(operands) == 1 || broadcast && len(operands) == 0 || hasAny(flags, "--version", "--man", "--completion")
	case "rdmarecv":
		ok = len(operands) == 0
	case "rdmacp":
		ok = len(operands) >= 2 || hasAny(flags, "--man", "--completion")
	}
	if !ok {
		return fmt.Errorf("%s takes no %d operands %q here", name, len(operands), operands)
	}
	return nil
}

func hasAny(words []string, any ...string) bool {
	for _, w := range words {
		for _, a := range any {
			if w == a {
				return true
			}
		}
	}
	return false
}
