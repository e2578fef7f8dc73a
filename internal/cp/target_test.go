package cp

import (
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

func TestParseTarget(t *testing.T) {
	cases := []struct {
		arg  string
		want Target
		bad  bool
	}{
		{arg: "node2:/data/", want: Target{Host: "node2", Path: "/data/"}},
		{arg: "alice@node2:file", want: Target{User: "alice", Host: "node2", Path: "file"}},
		{arg: "node2:", want: Target{Host: "node2", Path: "."}},
		{arg: "[fe80::1]:/tmp", want: Target{Host: "fe80::1", Path: "/tmp"}},
		{arg: "bob@[::1]:x:y", want: Target{User: "bob", Host: "::1", Path: "x:y"}},
		{arg: "node2:a@b", want: Target{Host: "node2", Path: "a@b"}},
		{arg: "/local/path", bad: true},
		{arg: "./a:b", bad: true},
		{arg: "dir/a:b", bad: true},
		{arg: ":/tmp", bad: true},
		{arg: "@node2:/tmp", bad: true},
		{arg: "-oProxyCommand=x:/tmp", bad: true},
		{arg: "[::1/tmp", bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.arg, func(t *testing.T) {
			got, err := ParseTarget(tc.arg)
			if tc.bad {
				if conn.KindOf(err) != conn.KindUsage {
					t.Fatalf("got %+v, %v; want a usage error", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
