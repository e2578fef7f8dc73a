package pipe

import (
	"context"
	"errors"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/source"
)

// relay sends what a receiver writes on to the next receiver (see
// RelayConfig) with a sender of its own, straight from the receive
// buffers where it can (see adopt), else copied. The receiver re-posts a
// buffer only once the relay is done with it, and confirms its stream
// only once the next receiver has confirmed its own. Its goroutine
// (start) streams with s or link, and the receiver's writer hands it
// the payloads; each field says who writes it and who reads it.
type relay struct {
	s    *sender // towards the next receiver: the receive loop's handshake sets it, the relay's goroutine streams with it
	name string  // the next receiver, for messages; set once
	// payloads carries what the writer hands over, in order; the writer
	// closes it after the last (end), the relay's sender's reader takes
	// them (relaySource).
	payloads chan payload
	// freed has a channel per receive buffer of this receiver's
	// connection, which gets a token once the relay is done with the
	// payload in it: copied; or, forwarded, two: its send completed (sends
	// may complete in any order) and the sender has hashed it. The
	// receive loop makes them (resize, before a writer starts), the
	// relay's goroutines put the tokens, the writer takes them (wait).
	freed []chan struct{}
	// done has the next receiver's stream's result, nil once confirmed:
	// the relay's goroutine sends it; the writer (confirmed) and close
	// take it and put it back.
	done    chan error
	started bool // start ran: the receive loop's
	// link, with RelayConfig.Repair, repairs the stream to the next receiver;
	// s is then its first sender, and the current one is link.s. The
	// receive loop's handshake sets it, the relay's goroutine runs it.
	link *link
	src  *relaySource // the input of every stream to a next receiver: its senders' readers use it
	view *chainView   // what the next receivers report: its senders store it, the receive loop passes it up
}

// payload is what arrived in receive buffer buf of the upstream connection.
type payload struct {
	buf int
	p   []byte
}

// resize makes a token channel for each of n receive buffers, for a new
// connection from the sender (the relay is done with every old one).
func (rl *relay) resize(n int) {
	rl.freed = make([]chan struct{}, n)
	for i := range rl.freed {
		rl.freed[i] = make(chan struct{}, 2)
	}
}

// sender returns the sender towards the current next receiver.
func (rl *relay) sender() *sender {
	if rl.link != nil {
		return rl.link.s
	}
	return rl.s
}

// adopt lets the relay send what arrives on up straight from its receive
// buffers, with the trailer rewritten in place, where the connection to
// the next receiver can (conn.Forwarder) and takes chunks as large, and
// the stream is neither encrypted (it is decrypted in place) nor
// repaired. up's window must be open.
func (rl *relay) adopt(up conn.Conn) {
	if rl.s.cfg.encrypt || rl.link != nil {
		return // a repairing relay keeps a copy of what it sends
	}
	if fw, ok := rl.s.c.(conn.Forwarder); ok && rl.s.c.Info().Chunk >= up.Info().Chunk && fw.Adopt(up) == nil {
		rl.s.fwd = &forwarding{Forwarder: fw, from: up, done: rl.free}
	}
}

// start streams to the next receiver until the writer closes payloads or
// ctx ends, and reports how it ended to the receive loop: the next
// receiver's confirmation, or a failure while ctx is live.
func (rl *relay) start(ctx context.Context, report func(endEvent, error)) {
	rl.payloads = make(chan payload, 1)
	rl.done = make(chan error, 1)
	rl.started = true
	open := func(b source.Buffers) source.Source {
		rl.src.b = b
		return rl.src
	}
	go func() {
		err := guard(func() error {
			if rl.link == nil {
				_, err := rl.s.stream(ctx, open)
				return err
			}
			_, err := rl.link.run(ctx, open)
			if errors.Is(err, errNoneLeft) {
				return rl.alone(ctx)
			}
			return err
		})
		rl.sender().failed(err)
		switch {
		case err == nil:
			report(evRelayConfirmed, nil)
		case ctx.Err() == nil:
			err = wrap(conn.KindOf(err), "forward to "+rl.name, err)
			report(evRelayFailed, err)
		}
		rl.done <- err
	}()
}

// forward hands payload p, which arrived in receive buffer buf, to the
// relay.
func (rl *relay) forward(ctx context.Context, buf int, p []byte) error {
	select {
	case rl.payloads <- payload{buf: buf, p: p}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// free says that the relay is done with receive buffer buf.
func (rl *relay) free(buf int) { rl.freed[buf] <- struct{}{} }

// wait waits until the relay is done with receive buffer buf.
func (rl *relay) wait(ctx context.Context, buf int) error {
	tokens := 1
	if rl.s.fwd != nil {
		tokens = 2
	}
	for range tokens {
		select {
		case <-rl.freed[buf]:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// alone takes what the writer hands over once no receiver is left to
// send it to (see RelayConfig.Repair), until the end of the stream.
func (rl *relay) alone(ctx context.Context) error {
	if rl.src.holding {
		rl.src.holding = false
		rl.free(rl.src.buf)
	}
	for {
		select {
		case p, ok := <-rl.payloads:
			if !ok {
				return nil
			}
			rl.free(p.buf)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// end ends the stream to the next receiver: the writer has handed over
// its last payload.
func (rl *relay) end() { close(rl.payloads) }

// confirmed waits for the next receiver's confirmation of the stream end
// ended and returns how many receivers down the chain it counts, and which
// were lost.
func (rl *relay) confirmed(ctx context.Context) (int, []string, error) {
	select {
	case err := <-rl.done:
		rl.done <- err // for close
		if rl.link != nil {
			return rl.link.s.receivers, rl.link.confirmedLost(), err
		}
		return rl.s.receivers, rl.s.lostHosts.names, err
	case <-ctx.Done():
		return 0, nil, context.Cause(ctx)
	}
}

// close waits for the stream to the next receiver to end, then closes
// the connection.
func (rl *relay) close() {
	if rl.started {
		rl.done <- <-rl.done
	}
	s := rl.sender()
	s.release()
	s.c.Close()
}

// relaySource is the input of the sender towards the next receiver: the
// payloads the receiver hands over. Forwarded, it returns the receive
// buffer each arrived in; else it copies them into send buffers (split
// where the next receiver's chunk is smaller). The reader of the relay's
// current sender uses it, then the relay's goroutine (alone).
type relaySource struct {
	rl      *relay
	b       source.Buffers // the current sender's send buffers: set when its stream opens the source
	rest    []byte         // what is left of the payload being copied
	buf     int            // the receive buffer it is in
	holding bool           // a payload is being copied
}

func (rs *relaySource) Next(ctx context.Context) (int, int, bool, error) {
	if !rs.holding {
		select {
		case p, ok := <-rs.rl.payloads:
			if !ok {
				i, err := rs.b.Take(ctx)
				return i, 0, err == nil, err
			}
			if rs.rl.s.fwd != nil {
				return p.buf, len(p.p), false, nil
			}
			rs.rest, rs.buf, rs.holding = p.p, p.buf, true
		case <-ctx.Done():
			return 0, 0, false, context.Cause(ctx)
		}
	}
	i, err := rs.b.Take(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	n := copy(rs.b.Bufs[i][:rs.b.Chunk], rs.rest)
	if rs.rest = rs.rest[n:]; len(rs.rest) == 0 {
		rs.holding = false
		rs.rl.free(rs.buf)
	}
	return i, n, false, nil
}

func (rs *relaySource) Close(int64) {}

func (rs *relaySource) Describe() string { return rs.rl.describe() }

// Serial reports false: a relay's payloads arrive already in memory, and
// its sender hands them to the pool to be sealed.
func (rs *relaySource) Serial() bool { return false }

// describe says where the stream goes on, and how (Stats.IO).
func (rl *relay) describe() string {
	if rl.s.fwd != nil {
		return "relay to " + rl.name + ", zero-copy"
	}
	return "relay to " + rl.name + ", one copy"
}
