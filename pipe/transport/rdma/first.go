package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// The first messages. MPA (RFC 5044, RFC 6581), iWARP's framing, wants the
// connection's initiator to send the first message and its responder to
// send nothing before it has received one. soft-iWARP (siw, Linux 6.1)
// fails a connection whose responder speaks first as soon as it is
// established: the dialer's kernel may read the listener's first message
// together with the MPA reply, and siw_recv_mpa_rr ends the connect with
// EINVAL ("peer sent extra data"). rdmapipe's engine has the receiver, the
// side that accepts, speak first; so on iWARP the transport puts a short
// exchange of its own before the engine's, and the engine sees none of it:
//
//   - the dialer sends the first message once the connection is
//     established;
//   - the listener, having received it, answers;
//   - the dialer, having the answer, confirms with the number of first
//     messages it sent, and Dial returns;
//   - the listener, having the confirmation, posts its receive buffers
//     again and Accept returns the connection.
//
// siw_accept installs the listener's receive upcall only after it has sent
// the MPA reply, so a first message that arrives in between stays unread in
// the socket until more data comes. The dialer therefore sends the first
// message once more (the nudge, which brings the first with it) when no
// answer came within nudgeAfter; the confirmation's count lets the
// listener take every first message before it hands the connection on.
// On InfiniBand and RoCE either side may send first and nothing is added.

// firstLen is the length of each message of the exchange: "RDP", its kind,
// the protocol version (u16), a count (u8) and a zero byte.
const firstLen = 8

// The kinds of the messages of the exchange.
const (
	kindFirst   = 'F' // the dialer's first message, and its nudge
	kindAnswer  = 'A' // the listener's answer to the first
	kindConfirm = 'C' // the dialer's confirmation; its count says how many firsts it sent
)

// maxFirsts is how many first messages a dialer sends at most: the first
// and one nudge. Each takes one of the listener's spare receives (of
// conn.SpareRecvs), which iWARP must have posted before it arrives.
const maxFirsts = 2

// nudgeAfter is how long a dialer waits for the answer before it sends the
// first message once more.
const nudgeAfter = time.Second

// speech says which side of a connection speaks first: on iWARP the
// dialer, and the listener only once it heard the dialer.
type speech struct {
	iwarp  bool // the connection is on an iWARP device
	dialer bool // this side connected (MPA's initiator)
}

// greets reports whether this side starts the exchange of first messages
// before it hands the connection on.
func (s speech) greets() bool { return s.iwarp && s.dialer }

// awaits reports whether this side must hear the first message before it
// may send anything.
func (s speech) awaits() bool { return s.iwarp && !s.dialer }

// firstMessage encodes a message of the exchange.
func firstMessage(kind byte, count int) []byte {
	b := []byte{'R', 'D', 'P', kind, 0, 0, byte(count), 0}
	binary.LittleEndian.PutUint16(b[4:], conn.Version)
	return b
}

// parseFirst decodes a message of the exchange and says what is wrong
// with it, if anything.
func parseFirst(b []byte) (kind byte, count int, err error) {
	if len(b) != firstLen || string(b[:3]) != "RDP" || b[7] != 0 {
		return 0, 0, fmt.Errorf("%d bytes %q, not a first message of rdmapipe's", len(b), b[:min(len(b), 16)])
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != conn.Version {
		return 0, 0, fmt.Errorf("a first message of protocol version %d, this side speaks %d", v, conn.Version)
	}
	return b[3], int(b[6]), nil
}

// hearing is a listener's books of the exchange: how many first messages
// it took.
type hearing struct {
	firsts int
}

// take takes one message of the dialer's and says whether to answer now
// and whether the exchange is over; anything but first messages (at most
// maxFirsts, with no count) and then a confirmation of their number is an
// error.
func (h *hearing) take(b []byte) (answer, done bool, err error) {
	kind, count, err := parseFirst(b)
	switch {
	case err != nil:
	case kind == kindFirst && count == 0 && h.firsts < maxFirsts:
		h.firsts++
		return h.firsts == 1, false, nil
	case kind == kindFirst && count == 0:
		err = fmt.Errorf("more than %d first messages", maxFirsts)
	case kind == kindConfirm && h.firsts > 0 && count == h.firsts:
		return false, true, nil
	case kind == kindConfirm:
		err = fmt.Errorf("a confirmation of %d first messages, where %d arrived", count, h.firsts)
	default:
		err = fmt.Errorf("a message of kind %q (count %d) where the sender's first messages were due", kind, count)
	}
	return false, false, err
}

// greet runs a dialer's side of the exchange: the first message, the
// nudge if the answer is late, the answer and the confirmation.
func (c *Conn) greet(ctx context.Context) error {
	sent := 1
	err := c.SendControl(ctx, firstMessage(kindFirst, 0))
	if err == nil {
		wait, cancel := context.WithTimeout(ctx, nudgeAfter)
		err = c.hear(wait, kindAnswer)
		cancel()
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		sent++
		if err = c.SendControl(ctx, firstMessage(kindFirst, 0)); err == nil {
			err = c.hear(ctx, kindAnswer)
		}
	}
	if err == nil {
		err = c.SendControl(ctx, firstMessage(kindConfirm, sent))
	}
	if err != nil {
		return fmt.Errorf("first messages (iWARP): %w", err)
	}
	return nil
}

// hear waits for the next message, which must be of kind want, and posts
// its receive buffer again.
func (c *Conn) hear(ctx context.Context, want byte) error {
	b, buf, err := c.next(ctx)
	if err != nil {
		return err
	}
	if kind, _, err := parseFirst(b); err != nil || kind != want {
		return fmt.Errorf("the receiver's answer: %q", b[:min(len(b), 16)])
	}
	return c.PostRecv(buf)
}

// next waits for the next completion, which must be a received message,
// and returns the message and its buffer.
func (c *Conn) next(ctx context.Context) ([]byte, int, error) {
	cs := make([]conn.Completion, 1)
	if _, err := c.Poll(ctx, cs); err != nil {
		return nil, 0, err
	}
	if cs[0].Op != conn.OpRecv {
		return nil, 0, fmt.Errorf("a completion of op %d where a first message was due", cs[0].Op)
	}
	return c.bufs.recv[cs[0].Buf][:cs[0].Len], cs[0].Buf, nil
}

// await runs a listener's side of the exchange, at most as long as ctx: it
// takes the first messages, answers the first and takes the confirmation,
// posting each receive buffer again. Anything else (another message, a
// failure, silence) fails the setup.
func (c *Conn) await(ctx context.Context) error {
	var h hearing
	for {
		b, buf, err := c.next(ctx)
		if err != nil {
			return err
		}
		answer, done, err := h.take(b)
		if err != nil {
			return fmt.Errorf("the sender's first messages (iWARP): %w", err)
		}
		if err := c.PostRecv(buf); err != nil {
			return err
		}
		if answer {
			if err := c.SendControl(ctx, firstMessage(kindAnswer, 0)); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
	}
}
