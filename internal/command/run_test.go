package command

import (
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
