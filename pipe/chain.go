package pipe

import (
	"context"
	"fmt"
	"strings"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Bounds on a chain of receivers (Config.Chain), which a receiver takes
// from its sender before it authenticates anything else about it.
const (
	maxChainHosts = 1024
	maxChainHost  = 255
	chainPiece    = conn.MaxControl - conn.TrailerLen - 1 // chain bytes per message
)

// sendChain sends the chain of receivers after the first, joined by
// newlines, in as many chain messages as it takes, each under a control
// credit (so no length of chain can overflow the receiver's spares); the
// first byte of each says whether more follow.
func (s *sender) sendChain(ctx context.Context) error {
	text := strings.Join(s.cfg.Chain, "\n")
	for {
		n := min(len(text), chainPiece)
		more := byte(0)
		if n < len(text) {
			more = 1
		}
		body := append([]byte{more}, text[:n]...)
		if err := s.handshakeControl(ctx, appendTrailer(body, msgChain, 0)); err != nil {
			return wrap(conn.KindSetup, "send the chain of receivers", err)
		}
		if text = text[n:]; more == 0 {
			return nil
		}
	}
}

// receiveChain reads the chain messages that follow an auth message with
// flagChain and checks what they name.
func (r *receiver) receiveChain(ctx context.Context) ([]string, error) {
	var text []byte
	for {
		msg, err := r.next(ctx)
		if err != nil {
			return nil, err
		}
		body, typ, _, _ := parseTrailer(msg)
		if typ != msgChain || len(body) < 1 {
			return nil, conn.Errorf(conn.KindSetup, "handshake", "unexpected message %s from the sender where the chain of receivers was due", describe(msg))
		}
		if text = append(text, body[1:]...); len(text) > maxChainHosts*(maxChainHost+1) {
			return nil, conn.Errorf(conn.KindSetup, "handshake", "the sender's chain of receivers is longer than %d bytes", maxChainHosts*(maxChainHost+1))
		}
		if body[0] == 0 {
			break
		}
	}
	hosts := strings.Split(string(text), "\n")
	if err := checkChain(hosts); err != nil {
		return nil, wrap(conn.KindSetup, "handshake", fmt.Errorf("the sender's chain of receivers: %w", err))
	}
	return hosts, nil
}

// checkChain checks a chain of receivers' addresses: at most
// maxChainHosts of them, each 1 to maxChainHost printable bytes without
// spaces.
func checkChain(hosts []string) error {
	if len(hosts) > maxChainHosts {
		return fmt.Errorf("%d hosts, at most %d", len(hosts), maxChainHosts)
	}
	for _, h := range hosts {
		if h == "" || len(h) > maxChainHost {
			return fmt.Errorf("a host address of %d bytes (1 to %d)", len(h), maxChainHost)
		}
		for _, c := range []byte(h) {
			if c <= ' ' || c > '~' {
				return fmt.Errorf("host address %q has a byte that cannot be in one", h)
			}
		}
	}
	return nil
}
