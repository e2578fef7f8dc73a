package remote

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
)

// Target is the remote end of a copy: [user@]HOST:DST, or
// scp://[user@]HOST[:PORT]/DST.
type Target struct {
	User string // empty: ssh's choice (its config, else the local user)
	Host string // as the user wrote it: a name, an address, or an ssh alias
	Port int    // ssh's port (ssh -p); 0: ssh's choice
	Path string // DST on the remote host; relative to the remote home
}

// SameHost says whether t and u are reached by the same ssh login.
func (t Target) SameHost(u Target) bool {
	return t.SSHDest() == u.SSHDest() && t.Port == u.Port
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
	if rest, ok := strings.CutPrefix(arg, uriScheme); ok {
		return parseURI(arg, rest)
	}
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
	return t.check(arg)
}

// uriScheme starts a target written as a URI (see parseURI).
const uriScheme = "scp://"

// parseURI parses arg, scp://[user@]HOST[:PORT][/PATH] as OpenSSH's scp
// takes it, whose rest after the scheme is rest: the user and PATH may be
// %-encoded, an IPv6 address goes in brackets, and PATH is what follows
// the slash after HOST (scp://h/f is f in the remote home, scp://h//tmp/f
// is /tmp/f; none is the home itself).
func parseURI(arg, rest string) (Target, error) {
	var t Target
	hostPort, path, _ := strings.Cut(rest, "/")
	if at := strings.LastIndex(hostPort, "@"); at >= 0 {
		user, _, _ := strings.Cut(hostPort[:at], ";") // connection parameters, ignored as OpenSSH does
		u, err := url.PathUnescape(user)
		if err != nil || u == "" || strings.ContainsRune(u, 0) {
			return Target{}, command.Usagef("%q: bad user name in the URI", arg)
		}
		t.User, hostPort = u, hostPort[at+1:]
	}
	host, port := hostPort, ""
	if i := strings.LastIndex(hostPort, ":"); i >= 0 && !strings.HasSuffix(hostPort, "]") {
		host, port = hostPort[:i], hostPort[i+1:]
	}
	t.Host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return Target{}, command.Usagef("%q: port %q: want 1 to 65535", arg, port)
		}
		t.Port = n
	}
	p, err := url.PathUnescape(path)
	if err != nil || strings.ContainsRune(p, 0) {
		return Target{}, command.Usagef("%q: bad path in the URI", arg)
	}
	t.Path = p
	return t.check(arg)
}

// check checks t, parsed from arg, and makes an empty path the remote
// home.
func (t Target) check(arg string) (Target, error) {
	if t.Host == "" {
		return Target{}, command.Usagef("%q: empty host name", arg)
	}
	if strings.ContainsAny(t.Host, "/@[]") || strings.Contains(t.Host, ":") && net.ParseIP(t.Host) == nil {
		return Target{}, command.Usagef("%q: bad host name %q", arg, t.Host)
	}
	if strings.HasPrefix(t.Host, "-") || strings.HasPrefix(t.User, "-") {
		return Target{}, command.Usagef("%q: a host or user name cannot start with '-'", arg)
	}
	if t.Path == "" {
		t.Path = "."
	}
	return t, nil
}
