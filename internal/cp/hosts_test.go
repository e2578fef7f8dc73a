package cp

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParseHosts(t *testing.T) {
	cases := []struct {
		name  string
		lists []string
		want  []string // SSHDest of each, in order
		err   string
	}{
		{"commas", []string{"a,b,c"}, []string{"a", "b", "c"}, ""},
		{"repeated flags", []string{"a", "b,c"}, []string{"a", "b", "c"}, ""},
		{"a host file", []string{"# nodes\nn1\n  n2 n3 # rack 2\n\nalice@n4\r\n"}, []string{"n1", "n2", "n3", "alice@n4"}, ""},
		{"IPv6", []string{"[fe80::1],10.0.0.2"}, []string{"fe80::1", "10.0.0.2"}, ""},
		{"twice", []string{"a,b", "a"}, nil, "a is named twice"},
		{"none", []string{"# nobody\n"}, nil, "no host named"},
		{"a path", []string{"a/b"}, nil, `"a/b" is not [user@]HOST`},
		{"a colon", []string{"a:b"}, nil, `"a:b" is not [user@]HOST`},
		{"an option", []string{"-oProxyCommand=x"}, nil, "is not [user@]HOST"},
		{"too many", []string{manyHosts(maxHosts + 1)}, nil, "more than 1024 hosts"},
		{"the most", []string{manyHosts(maxHosts)}, strings.Split(manyHosts(maxHosts), ","), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := parseHosts(tc.lists, "/dst")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error with %q", ts, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tg := range ts {
				got = append(got, tg.SSHDest())
				if tg.Path != "/dst" {
					t.Errorf("%s: path %q, want /dst", tg.SSHDest(), tg.Path)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// manyHosts returns n host names, comma-separated.
func manyHosts(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
	}
	return strings.Join(names, ",")
}
