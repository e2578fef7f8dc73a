package cp

import (
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
)

// Target is the remote end of a copy: [user@]HOST:DST.
type Target struct {
	User string // empty: ssh's choice (its config, else the local user)
	Host string // as the user wrote it: a name, an address, or an ssh alias
	Path string // DST on the remote host; relative to the remote home
}

// SSHDest is the destination argument for ssh: [user@]HOST.
func (t Target) SSHDest() string {
	if t.User == "" {
		return t.Host
	}
	return t.User + "@" + t.Host
}

// ParseTarget parses [user@]HOST:PATH. An IPv6 address goes in brackets
// ([fe80::1]:dst). PATH may be empty, meaning the remote home directory.
// As in scp, a slash before the first colon makes arg a local path
// (./a:b), not a host.
func ParseTarget(arg string) (Target, error) {
	var t Target
	if colon := strings.Index(arg, ":"); colon < 0 || strings.Contains(arg[:colon], "/") {
		return Target{}, command.Usagef("%q is not [user@]HOST:PATH", arg)
	}
	rest := arg
	if i := strings.LastIndex(rest, "@"); i >= 0 && !strings.Contains(rest[:i], ":") {
		t.User, rest = rest[:i], rest[i+1:]
		if t.User == "" {
			return Target{}, command.Usagef("%q: empty user name before @", arg)
		}
	}
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]:")
		if end < 0 {
			return Target{}, command.Usagef("%q: expected [ADDRESS]:DST", arg)
		}
		t.Host, t.Path = rest[1:end], rest[end+2:]
	} else {
		host, path, ok := strings.Cut(rest, ":")
		if !ok {
			return Target{}, command.Usagef("%q is not [user@]HOST:PATH", arg)
		}
		t.Host, t.Path = host, path
	}
	if t.Host == "" {
		return Target{}, command.Usagef("%q: empty host name", arg)
	}
	if strings.HasPrefix(t.Host, "-") || strings.HasPrefix(t.User, "-") {
		return Target{}, command.Usagef("%q: a host or user name cannot start with '-'", arg)
	}
	if t.Path == "" {
		t.Path = "."
	}
	return t, nil
}
