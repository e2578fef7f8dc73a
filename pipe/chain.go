package pipe

import (
	"context"
	"fmt"
	"strings"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// sendChain sends the chain of receivers after the first, joined by
// newlines, in as many chain messages as it takes, each under a control
// credit (so no length of chain can overflow the receiver's spares); the
// first byte of each says whether more follow.
func (s *sender) sendChain(ctx context.Context, chain []string) error {
	text := strings.Join(chain, "\n")
	for {
		n := min(len(text), wire.ChainPiece)
		more := byte(0)
		if n < len(text) {
			more = 1
		}
		body := append([]byte{more}, text[:n]...)
		if err := s.handshakeControl(ctx, wire.AppendTrailer(body, wire.MsgChain, 0)); err != nil {
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
		msg, err := r.handshakeMessage(ctx)
		if err != nil {
			return nil, err
		}
		body, typ, _, _ := wire.ParseTrailer(msg)
		if typ != wire.MsgChain || len(body) < 1 {
			return nil, conn.Errorf(conn.KindSetup, "handshake", "unexpected message %s from the sender where the chain of receivers was due", wire.Describe(msg))
		}
		if text = append(text, body[1:]...); len(text) > wire.MaxChainHosts*(wire.MaxChainHost+1) {
			return nil, conn.Errorf(conn.KindSetup, "handshake", "the sender's chain of receivers is longer than %d bytes", wire.MaxChainHosts*(wire.MaxChainHost+1))
		}
		if body[0] == 0 {
			break
		}
	}
	hosts := strings.Split(string(text), "\n")
	if err := wire.CheckChain(hosts); err != nil {
		return nil, wrap(conn.KindSetup, "handshake", fmt.Errorf("the sender's chain of receivers: %w", err))
	}
	return hosts, nil
}
