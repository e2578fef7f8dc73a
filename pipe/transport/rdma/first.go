package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// The first message. MPA (RFC 5044, RFC 6581), iWARP's framing, wants the
// connection's initiator to send the first message and its responder to
// send nothing before it has received one. soft-iWARP (siw) fails a
// connection whose responder speaks first as soon as it is established:
// the dialer's kernel may read the listener's first message together with
// the MPA reply, and siw_recv_mpa_rr ends the connect with EINVAL ("peer
// sent extra data"). rdmapipe's engine has the receiver, the side that
// accepts, speak first; so on iWARP the transport puts a message of its
// own before the engine's: the dialer sends it once the connection is
// established, before Dial returns, and the listener takes it (and posts
// its receive buffer again) before Accept returns the connection. On
// InfiniBand and RoCE either side may send first and nothing is added.

// firstLen is the length of the first message: "RDPF", the protocol
// version (u16) and two zero bytes.
const firstLen = 8

var firstMagic = [4]byte{'R', 'D', 'P', 'F'}

// speech says which side of a connection speaks first: on iWARP the
// dialer, and the listener only once it heard the dialer.
type speech struct {
	iwarp  bool // the connection is on an iWARP device
	dialer bool // this side connected (MPA's initiator)
}

// greets reports whether this side sends the first message before it
// hands the connection on.
func (s speech) greets() bool { return s.iwarp && s.dialer }

// awaits reports whether this side must receive the first message before
// it may send anything.
func (s speech) awaits() bool { return s.iwarp && !s.dialer }

// firstMessage returns the first message.
func firstMessage() []byte {
	b := make([]byte, firstLen)
	copy(b, firstMagic[:])
	binary.LittleEndian.PutUint16(b[4:], conn.Version)
	return b
}

// checkFirst says what is wrong with b as the first message, if anything.
func checkFirst(b []byte) error {
	if !bytes.Equal(b, firstMessage()) {
		return fmt.Errorf("the sender's first message is %d bytes %q, not the %d bytes %q of this protocol version", len(b), quoteHead(b), firstLen, firstMessage())
	}
	return nil
}

// quoteHead returns at most the first 16 bytes of b, for an error message.
func quoteHead(b []byte) []byte {
	return b[:min(len(b), 16)]
}

// greet sends the first message on a dialer's connection.
func (c *Conn) greet(ctx context.Context) error {
	if err := c.SendControl(ctx, firstMessage()); err != nil {
		return fmt.Errorf("send the first message: %w", err)
	}
	return nil
}

// await waits, at most as long as ctx, for the dialer's first message on a
// listener's connection, checks it and posts its receive buffer again.
// Anything else (another completion, a failure, silence) fails the setup.
func (c *Conn) await(ctx context.Context) error {
	cs := make([]conn.Completion, 1)
	if _, err := c.Poll(ctx, cs); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("waiting for the sender's first message: %w", err)
	}
	if cs[0].Op != conn.OpRecv {
		return fmt.Errorf("a completion of op %d where the sender's first message was due", cs[0].Op)
	}
	if err := checkFirst(c.bufs.recv[cs[0].Buf][:cs[0].Len]); err != nil {
		return err
	}
	return c.PostRecv(cs[0].Buf)
}
