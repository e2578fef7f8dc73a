package cp

import (
	"strings"
	"testing"
)

// TestVisWriter checks that the remote side's stderr reaches the terminal
// with no byte that could control it, however its writes are cut, and
// ssh's line ends (a return and a newline) as newlines.
func TestVisWriter(t *testing.T) {
	cases := []struct{ in, want string }{
		{"rdmacp: no such file\n", "rdmacp: no such file\n"},
		{"a\tb\n", "a\tb\n"},
		{"\x1b[2J\x1b[1;1Hfake prompt$ ", `\u001b[2J\u001b[1;1Hfake prompt$ `},
		{"100%\rrdmacp: done\n", `100%\u000drdmacp: done` + "\n"},
		{"Permission denied (publickey).\r\n", "Permission denied (publickey).\n"},
		{"a\r\rb\r\n\r", `a\u000d\u000db` + "\n" + `\u000d`},
		{"cut \xe6\x97", `cut \xe6\x97`},
		{"bell\a back\b", `bell\u0007 back\u0008`},
		{"né · 日本\n", "né · 日本\n"},
		{"bad \xff\xfe utf-8", `bad \xff\xfe utf-8`},
		{"c1 \u009b31m", `c1 \u009b31m`},
		{"rtl \u202e", `rtl \u202e`},
	}
	for _, tc := range cases {
		for cut := 0; cut <= len(tc.in); cut++ {
			var out strings.Builder
			v := &visWriter{w: &out}
			for _, part := range []string{tc.in[:cut], tc.in[cut:]} {
				if n, err := v.Write([]byte(part)); err != nil || n != len(part) {
					t.Fatalf("%q cut at %d: Write = %d, %v", tc.in, cut, n, err)
				}
			}
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("%q cut at %d: wrote %q, want %q", tc.in, cut, out.String(), tc.want)
			}
		}
	}
}
