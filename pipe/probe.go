package pipe

import (
	"context"
	"errors"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// ErrProbe is what Receive returns when the sender only checked the
// connection (see Probe): no stream was sent, nothing was written, and a
// receiver serving one stream should wait for the real sender.
var ErrProbe = errors.New("the sender only checked the connection")

// Probe checks that a receiver is there and would accept a stream from
// this side: it completes the rdmapipe handshake on c (the key proofs
// included, if cfg has a key) and sends no data. It returns c's
// description, or why the receiver would not take a stream. Probe does not
// close c; closing it ends the receiver's side of the probe.
func Probe(ctx context.Context, c conn.Conn, cfg SendConfig) (conn.Info, error) {
	s := newSender(c, cfg.stream(), cfg.timeouts(), "receiver")
	defer s.release()
	err := guard(func() error {
		_, err := s.handshake(ctx, proposal{flags: wire.FlagProbe})
		return err
	})
	s.failed(err)
	return c.Info(), err
}

// endProbe waits, within the handshake timeout, for a probing sender to
// hang up after the welcome, and returns ErrProbe.
func (r *receiver) endProbe(parent context.Context) error {
	ctx, cancel := r.handshakeContext(parent, "the probing sender did not hang up", 1)
	defer cancel()
	for {
		if _, err := r.poll(ctx); err != nil {
			return ErrProbe
		}
	}
}
