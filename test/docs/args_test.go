package docs

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// oddArgs are command lines a user may type by mistake, or that the
// completion scripts run: none may make a command panic (a bug, which the
// commands report as "bug:" with exit 1) or hang; each ends at once.
var oddArgs = [][]string{
	{"--li", "--generate-bash-completion"}, {"--generate-bash-completion"}, {"-", "--generate-bash-completion"},
	{"-rpz", "--generate-bash-completion"}, {"x", "y", "--generate-bash-completion"},
	{"--", "x"}, {"-"}, {"---"}, {"-="}, {"--="}, {"--=x"}, {"-rp"}, {"-h", "-h"}, {"--help", "--nope"},
	{"--port"}, {"--port", "99999", "h"}, {"--port=-1", "h"}, {"--timeout", "5", "h"}, {"--timeout="},
	{"--limit-rate", "x", "h"}, {"--to"}, {"--to", ",,,"}, {"--to-file", "/nonexistent"},
	{"--chunk-size", "0", "h"}, {"--depth", "-3", "h"}, {"--completion", "tcsh"}, {"--completion"},
	{"--stats-interval", "-1s", "h"}, {"--qps", "99", "h"}, {"--exclude"}, {"--filter=merge"},
	{"--data-ports", "9-1", "h:", "x"}, {":"}, {"h:"}, {"scp://"}, {"a", "scp://%zz/x"},
	{"--version", "--help"}, {"--man", "--completion", "bash"},
}

func TestNoPanics(t *testing.T) {
	for name := range ours {
		for _, args := range oddArgs {
			t.Run(name+" "+strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var stderr bytes.Buffer
				cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
				cmd.Stderr = &stderr
				err := cmd.Run()
				if ctx.Err() != nil {
					t.Fatalf("still running after 30 s; stderr:\n%s", stderr.String())
				}
				if ee, ok := err.(*exec.ExitError); ok && !ee.Exited() || strings.Contains(stderr.String(), "bug: ") {
					t.Errorf("%v; stderr:\n%s", err, stderr.String())
				}
			})
		}
	}
}
