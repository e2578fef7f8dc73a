package sendrecv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
)

// relayPolicy says which next receivers a receiver started with --relay
// relays to when its sender names a chain (pipe.RelayConfig.Allow). With an
// allowlist (--relay-allow), only the hosts and networks on it; without
// one (allowed only with a key, whose proof comes first), any host but
// loopback, link-local, unspecified and multicast addresses, which are
// reachable only when the allowlist names them.
type relayPolicy struct {
	prefixes []netip.Prefix // addresses and networks allowed
	names    []string       // host names allowed, lower case
	port     int            // the port of a next receiver named without one
	resolve  func(ctx context.Context, host string) ([]netip.Addr, error)
}

// parseRelayAllow reads --relay-allow entries: host names, addresses and
// networks in CIDR notation, each given once or comma-separated.
func parseRelayAllow(entries []string, port int) (relayPolicy, error) {
	p := relayPolicy{port: port, resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}}
	for _, list := range entries {
		for e := range strings.SplitSeq(list, ",") {
			e = strings.TrimSpace(e)
			if pre, err := netip.ParsePrefix(e); err == nil {
				p.prefixes = append(p.prefixes, pre.Masked())
				continue
			}
			if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				p.prefixes = append(p.prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			if e == "" || strings.ContainsAny(e, "/[]: ") {
				return p, command.Usagef("--relay-allow %q: give host names, addresses or networks (10.0.0.0/8)", e)
			}
			p.names = append(p.names, strings.ToLower(strings.TrimSuffix(e, ".")))
		}
	}
	return p, nil
}

// restricted reports whether the policy has an allowlist.
func (p relayPolicy) restricted() bool { return len(p.prefixes)+len(p.names) > 0 }

// check returns the address to connect to for next, a host with or
// without a port as the sender named it: the first address it resolves to
// that the policy allows. Connecting to that address, not the name, means
// a second lookup cannot point elsewhere.
func (p relayPolicy) check(ctx context.Context, next string) (string, error) {
	host, port, err := net.SplitHostPort(hostPort(next, p.port))
	if err != nil {
		return "", err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q", port)
	}
	named := slices.Contains(p.names, strings.ToLower(strings.TrimSuffix(host, ".")))
	if p.restricted() && !named && len(p.prefixes) == 0 {
		return "", errors.New("not on the relay allowlist")
	}
	addrs, err := p.resolve(ctx, host)
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		a = a.Unmap()
		listed := named || slices.ContainsFunc(p.prefixes, func(pre netip.Prefix) bool { return pre.Contains(a) })
		switch {
		case p.restricted() && !listed:
		case special(a) && !listed:
		default:
			return net.JoinHostPort(a.String(), port), nil
		}
	}
	if p.restricted() {
		return "", fmt.Errorf("%s resolves to %v, none of it on the relay allowlist", host, addrs)
	}
	return "", fmt.Errorf("%s resolves to %v: loopback, link-local, unspecified or multicast addresses only when the relay allowlist names them", host, addrs)
}

// special reports whether a is an address a relay reaches only when told
// to by name: this host, its links, or no host in particular.
func special(a netip.Addr) bool {
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsUnspecified() || a.IsMulticast() || a.IsInterfaceLocalMulticast()
}
