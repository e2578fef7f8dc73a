package remote

import (
	"slices"
	"strings"
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
		// scp://[user@]HOST[:PORT][/PATH], as OpenSSH's scp takes it
		{arg: "scp://node2/data/f", want: Target{Host: "node2", Path: "data/f"}},
		{arg: "scp://alice@node2:2222//data/", want: Target{User: "alice", Host: "node2", Port: 2222, Path: "/data/"}},
		{arg: "scp://node2", want: Target{Host: "node2", Path: "."}},
		{arg: "scp://node2:22/", want: Target{Host: "node2", Port: 22, Path: "."}},
		{arg: "scp://a%40b;fingerprint=x@[fe80::1]:22/my%20file", want: Target{User: "a@b", Host: "fe80::1", Port: 22, Path: "my file"}},
		{arg: "scp://[::1]/x", want: Target{Host: "::1", Path: "x"}},
		{arg: "scp://node2:0/x", bad: true},
		{arg: "scp://node2:65536/x", bad: true},
		{arg: "scp://node2:ssh/x", bad: true},
		{arg: "scp://@node2/x", bad: true},
		{arg: "scp:///x", bad: true},
		{arg: "scp://-oProxyCommand=x/y", bad: true},
		{arg: "scp://node2/a%00b", bad: true},
		{arg: "scp://node2/a%zz", bad: true},
		{arg: "scp://a:b:c/x", bad: true},
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

// TestRemoteArgvPort: a URI's port goes to ssh first, before -P's (ssh
// takes the first -p).
func TestRemoteArgvPort(t *testing.T) {
	c := Command{SSH: []string{"ssh", "-F", "cfg", "-p", "22"}, RemoteCmd: "rdmacp"}
	argv := c.remoteArgv(Target{Host: "h", Port: 2222}, "--remote-receive")
	if strings.Join(argv[:7], " ") != "ssh -p 2222 -F cfg -p 22" || strings.Join(argv[len(argv)-3:], " ") != "-- h rdmacp --remote-receive" {
		t.Fatalf("argv %q", argv)
	}
	if argv := c.remoteArgv(Target{Host: "h"}, "--remote-receive"); strings.Join(argv[:5], " ") != "ssh -F cfg -p 22" {
		t.Fatalf("without a port: argv %q", argv)
	}
}

func TestRemoteArgv(t *testing.T) {
	tg := Target{Host: "node7", Path: "/d"}
	cases := []struct {
		name string
		c    Command
		want []string
	}{
		{"ssh", Command{SSH: []string{"ssh", "-p", "2"}, RemoteCmd: "rdmacp"},
			append(append([]string{"ssh", "-p", "2"}, sshOptions...), "--", "node7", "rdmacp --remote-receive")},
		{"launcher, host last", Command{Launcher: []string{"clush", "-N", "-w"}, RemoteCmd: "/opt/rdmacp"},
			[]string{"clush", "-N", "-w", "node7", "/opt/rdmacp", "--remote-receive"}},
		{"launcher with %h", Command{Launcher: []string{"srun", "-N1", "-n1", "--nodelist=%h", "--"}, RemoteCmd: "env X=1 rdmacp"},
			[]string{"srun", "-N1", "-n1", "--nodelist=node7", "--", "env", "X=1", "rdmacp", "--remote-receive"}},
	}
	for _, tc := range cases {
		if got := tc.c.remoteArgv(tg, "--remote-receive"); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
