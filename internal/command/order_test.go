package command

import (
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestFlagsFirst: flags after operands move ahead of them with their
// values; names that are not flags, and everything after "--", stay.
func TestFlagsFirst(t *testing.T) {
	app := &cli.App{
		UseShortOptionHandling: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "to", Aliases: []string{"t"}},
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r"}},
			&cli.BoolFlag{Name: "p"},
		},
	}
	tests := []struct{ args, want string }{
		{"rdmacp", "rdmacp"},
		{"rdmacp --to a,b h0:f dst", "rdmacp --to a,b h0:f dst"},
		{"rdmacp h0:f --to a,b dst", "rdmacp --to a,b h0:f dst"},
		{"rdmacp h0:f dst --to=a,b -r", "rdmacp --to=a,b -r h0:f dst"},
		{"rdmacp src -rp dst -t a", "rdmacp -rp -t a src dst"},
		{"rdmacp src -rx dst", "rdmacp src -rx dst"},
		{"rdmacp src -rt a dst", "rdmacp src -rt a dst"},
		{"rdmacp src - -x dst", "rdmacp src - -x dst"},
		{"rdmacp src --help", "rdmacp --help src"},
		{"rdmacp src -- -r --to", "rdmacp -- src -r --to"},
		{"rdmacp -r -- -src dst", "rdmacp -r -- -src dst"},
		{"rdmacp src dst --to", "rdmacp --to src dst"},
		{"rdmacp src --generate-bash-completion", "rdmacp src --generate-bash-completion"},
	}
	for _, tt := range tests {
		got := flagsFirst(app, strings.Fields(tt.args))
		if !slices.Equal(got, strings.Fields(tt.want)) {
			t.Errorf("flagsFirst(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}
