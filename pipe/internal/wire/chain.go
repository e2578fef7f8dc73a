package wire

import (
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Bounds on a chain of receivers (pipe.SendConfig.Chain), which a receiver takes
// from its sender before it authenticates anything else about it.
const (
	MaxChainHosts = 1024
	MaxChainHost  = 255
	ChainPiece    = conn.MaxControl - conn.TrailerLen - 1 // chain bytes per message
)

// CheckChain checks a chain of receivers' addresses: at most
// MaxChainHosts of them, each 1 to MaxChainHost printable bytes without
// spaces.
func CheckChain(hosts []string) error {
	if len(hosts) > MaxChainHosts {
		return fmt.Errorf("%d hosts, at most %d", len(hosts), MaxChainHosts)
	}
	for _, h := range hosts {
		if h == "" || len(h) > MaxChainHost {
			return fmt.Errorf("a host address of %d bytes (1 to %d)", len(h), MaxChainHost)
		}
		for _, c := range []byte(h) {
			if c <= ' ' || c > '~' {
				return fmt.Errorf("host address %q has a byte that cannot be in one", h)
			}
		}
	}
	return nil
}
