package docs

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpStreams checks where each command writes its help, its version
// and its usage errors: --help and --version on stdout with exit 0 (so that `rdmasend --help | less`
// shows it), a bad flag on stderr with exit 2 and nothing on stdout.
func TestHelpStreams(t *testing.T) {
	for name := range ours {
		for _, tc := range []struct {
			args           []string
			code           int
			stdout, stderr string // what each must hold; "" must be empty
		}{
			{[]string{"--help"}, 0, "Usage: ", ""},
			{[]string{"-h"}, 0, "Usage: ", ""},
			{[]string{"--version"}, 0, name + " (devel) (github.com/rdmapipe/rdmapipe, revision ", ""},
			{[]string{"--no-such-flag"}, 2, "", name + ": flag provided but not defined: -no-such-flag (see --help)"},
		} {
			t.Run(name+" "+strings.Join(tc.args, " "), func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				cmd := exec.Command(filepath.Join(bin, name), tc.args...)
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				if code != tc.code {
					t.Errorf("exit %d, want %d", code, tc.code)
				}
				for _, s := range []struct {
					what, got, want string
				}{{"stdout", stdout.String(), tc.stdout}, {"stderr", stderr.String(), tc.stderr}} {
					if s.want == "" && s.got != "" || !strings.Contains(s.got, s.want) {
						t.Errorf("%s %q, want it to hold %q", s.what, s.got, s.want)
					}
				}
			})
		}
	}
}
