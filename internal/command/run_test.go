package command

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestRunFlags runs an app through Run with flags set on the command line,
// by the environment and not at all: what the action sees (values, IsSet)
// is what urfave/cli gives, and a flag's Action runs when the flag is set,
// and only then.
func TestRunFlags(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		env        string // value of RUN_TEST_NUM, "" unset
		wantSet    map[string]bool
		wantName   string
		wantNum    int
		wantAction int // times the action flag's Action ran
	}{
		{"nothing set", []string{"app"}, "", map[string]bool{"name": false, "n": false, "num": false, "act": false}, "dflt", 7, 0},
		{"alias and env", []string{"app", "-n", "x"}, "42", map[string]bool{"name": true, "n": true, "num": true, "act": false}, "x", 42, 0},
		{"action flag set", []string{"app", "--act", "--name", "y"}, "", map[string]bool{"name": true, "num": false, "act": true}, "y", 7, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("RUN_TEST_NUM", tt.env)
			}
			actions := 0
			var gotSet map[string]bool
			var gotName string
			var gotNum int
			app := &cli.App{
				Name: "app",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Aliases: []string{"n"}, Value: "dflt"},
					&cli.IntFlag{Name: "num", Value: 7, EnvVars: []string{"RUN_TEST_NUM"}},
					&cli.BoolFlag{Name: "act", Action: func(*cli.Context, bool) error { actions++; return nil }},
				},
				Action: func(c *cli.Context) error {
					gotSet = map[string]bool{}
					for name := range tt.wantSet {
						gotSet[name] = c.IsSet(name)
					}
					gotName, gotNum = c.String("name"), c.Int("num")
					return nil
				},
			}
			if code := Run(app, tt.args, nil); code != 0 {
				t.Fatalf("Run(%q) = %d, want 0", tt.args, code)
			}
			for name, want := range tt.wantSet {
				if gotSet[name] != want {
					t.Errorf("IsSet(%q) = %v, want %v", name, gotSet[name], want)
				}
			}
			if gotName != tt.wantName || gotNum != tt.wantNum {
				t.Errorf("name, num = %q, %d; want %q, %d", gotName, gotNum, tt.wantName, tt.wantNum)
			}
			if actions != tt.wantAction {
				t.Errorf("the flag's Action ran %d times, want %d", actions, tt.wantAction)
			}
		})
	}
}

// FuzzRun runs command lines through Run with an app that has a flag of
// each kind the commands use (letters that combine, as rdmacp's do): no
// argument, in any order, with or without the completion scripts' flag
// at the end, makes it panic (Run reports a panic as a bug, exit 1).
func FuzzRun(f *testing.F) {
	for _, args := range []string{
		"--li\x00--generate-bash-completion", // urfave/cli's completion path dereferenced a nil flag set
		"--generate-bash-completion", "-rp\x00src\x00h:dst", "--to\x00a,b\x00-t", "--timeout=5", "--\x00-r",
		"-h", "--help\x00--nope", "--filter=merge", "-x", "---r", "-=", "--=", "-r=1", "--count=9999999999999999999",
	} {
		f.Add(args)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := append([]string{"app"}, strings.Split(line, "\x00")...)
		var stdout, stderr bytes.Buffer
		run(fuzzApp(), args, nil, &stdout, &stderr)
		if strings.Contains(stderr.String(), "bug: ") {
			t.Fatalf("%q: %s", args, stderr.String())
		}
	})
}

// fuzzApp is an app with a flag of each kind the commands use.
func fuzzApp() *cli.App {
	return &cli.App{
		Name:                   "app",
		HideHelpCommand:        true,
		UseShortOptionHandling: true,
		OnUsageError:           OnUsageError,
		Flags: append(DocFlags(), VersionFlag(),
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r"}},
			&cli.BoolFlag{Name: "preserve", Aliases: []string{"p"}},
			&cli.StringFlag{Name: "transport", Aliases: []string{"t"}, Value: "auto"},
			&cli.IntFlag{Name: "count", Aliases: []string{"c"}},
			&cli.DurationFlag{Name: "timeout"},
			&cli.StringSliceFlag{Name: "to"},
			&cli.GenericFlag{Name: "filter", Value: &fuzzGeneric{}},
		),
		Action: func(c *cli.Context) error {
			_, err := Early(c, c.App.Writer)
			return err
		},
	}
}

// fuzzGeneric is a cli.Generic that refuses an empty value.
type fuzzGeneric struct{ v []string }

func (g *fuzzGeneric) Set(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	g.v = append(g.v, s)
	return nil
}

func (g *fuzzGeneric) String() string { return strings.Join(g.v, ",") }
