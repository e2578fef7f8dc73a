package command

import (
	"bytes"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestManPage renders the man page of small apps through --man, as the
// commands do, and checks its parts: roff escaping, the synopsis, the
// description's paragraphs and verbatim blocks, the flags by category
// (in the order of their first flags; --help and --version in the first)
// with their whole usage, and no hidden flag.
func TestManPage(t *testing.T) {
	tests := []struct {
		name      string
		app       *cli.App
		want      []string // substrings, in this order
		forbidden []string
	}{
		{
			name:      "minimal",
			app:       &cli.App{Name: "tool", Usage: "do a thing"},
			want:      []string{".TH tool 1\n", ".SH NAME\ntool \\- do a thing\n", ".SH OPTIONS\n", ".TP\n\\fB-h, --help\\fR\nprint this help and exit\n", ".TP\n\\fB--version\\fR\nprint the version and exit\n.br\nThe module version"},
			forbidden: []string{".SH SYNOPSIS", ".SH DESCRIPTION", "--man", "--completion"},
		},
		{
			name: "full",
			app: &cli.App{
				Name:        "rdmafoo",
				Usage:       `send a\b`,
				UsageText:   "rdmafoo [flags] HOST\n   rdmafoo --to HOST,HOST",
				Description: "First paragraph,\n.starts with a dot.\n\nEXAMPLES:\n   rdmafoo node2 < x\n   'quoted\nback to text",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "key-file", Usage: "read the key from `FILE`\nThe key never crosses the wire.", Category: "Security", EnvVars: []string{"FOO_KEY_FILE"}},
					&cli.IntFlag{Name: "port", Aliases: []string{"P"}, Value: 18800, Usage: "port", Category: "Common"},
					&cli.BoolFlag{Name: "secret", Hidden: true, Usage: "not shown"},
				},
			},
			want: []string{
				".TH rdmafoo 1\n", "rdmafoo \\- send a\\eb\n",
				".SH SYNOPSIS\n.nf\nrdmafoo [flags] HOST\nrdmafoo --to HOST,HOST\n.fi\n",
				".SH DESCRIPTION\nFirst paragraph,\n\\&.starts with a dot.\n.PP\nEXAMPLES:\n.nf\n   rdmafoo node2 < x\n   'quoted\n.fi\nback to text\n",
				".SH OPTIONS\n",
				".SS Security\n.TP\n\\fB-h, --help\\fR\n", ".TP\n\\fB--key-file FILE\\fR\nread the key from FILE\n.br\nThe key never crosses the wire.\nRead from $FOO_KEY_FILE when not given.\n",
				".SS Common\n.TP\n\\fB-P, --port N\\fR\nport (default: 18800)\n",
			},
			forbidden: []string{"secret", "not shown"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			app := tt.app
			app.Flags = append(Flags(), app.Flags...)
			app.HideHelp = true
			app.Action = func(c *cli.Context) error {
				handled, err := Docs(c, &out)
				if !handled {
					t.Error("Docs did not handle --man")
				}
				return err
			}
			if err := app.Run([]string{app.Name, "--man"}); err != nil {
				t.Fatalf("%s --man: %v", app.Name, err)
			}
			page := out.String()
			rest := page
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("man page lacks %q (in this order); page:\n%s", w, page)
				}
				rest = rest[i+len(w):]
			}
			for _, f := range tt.forbidden {
				if strings.Contains(page, f) {
					t.Errorf("man page contains %q; page:\n%s", f, page)
				}
			}
		})
	}
}
