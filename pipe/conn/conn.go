// Package conn defines what a transport provides to the rdmapipe engine
// (package pipe): Conn, a small interface with the semantics of an RDMA
// reliable-connected queue pair, the Dialer and Listener that make one, the
// stream Params the two peers agree on when they connect, the buffer
// Layout each side sizes from them, and the classified Error both report.
//
// It is a leaf: transports (pipe/transport/...) import it and never the
// engine, as database/sql drivers import database/sql/driver.
package conn

import (
	"context"
	"errors"
)

// Op says which kind of work request a Completion reports.
type Op uint8

const (
	// OpSend reports that a PostSend finished: its send buffer may be reused.
	OpSend Op = iota + 1
	// OpRecv reports that a message arrived in a posted receive buffer.
	OpRecv
	// OpForward reports that a PostForward finished: the other
	// connection's receive buffer it sent from may be re-posted.
	OpForward
)

// Completion reports one finished work request. Completions of one kind
// need not come in the order the work was posted, except OpRecv: messages
// arrive in order.
type Completion struct {
	Op  Op  // OpSend, OpRecv or OpForward
	Buf int // index of the send buffer, or of the receive buffer (OpRecv; OpForward: the adopted connection's)
	Len int // bytes received (OpRecv); bytes sent (OpSend, OpForward)
}

// Conn is a reliable, ordered, message-oriented connection between a sender
// and a receiver, shaped like an RDMA RC queue pair:
//
//   - Each side owns SendBufs() send buffers and RecvBufs() receive buffers,
//     allocated (and, for RDMA, registered) once when the connection is made.
//   - A message arrives only in a receive buffer its receiver posted before;
//     when a Conn is returned all of its receive buffers are already posted.
//     Messages arrive in the order they were sent and are never merged.
//   - Every message finds a receive buffer posted for it: the engine sends
//     one only when the peer has room. A sender has at most
//     RecvBufs()-SpareRecvs PostSend messages (data credits) and at most
//     SpareRecvs SendControl messages (control credits, the last one kept
//     for the abort) in flight; each credit comes back once its buffer is
//     re-posted. A receiver's messages are bounded by the protocol (see
//     SenderLayout). A transport may keep a receiver's last SpareRecvs
//     buffers for control messages and the others for data (the RDMA ring
//     does), or use any posted buffer for either.
//   - A message that finds no buffer posted for it (of its kind, where the
//     transport keeps them apart) means the peer broke the protocol: the
//     transport fails the connection, on both ends where it can. It never
//     waits for a buffer to be posted: iWARP cannot, and neither can a
//     remote write. (InfiniBand and RoCE queue pairs retry on "receiver
//     not ready" before they fail.)
//   - Receive buffers that hold PostSend messages are re-posted in the order
//     those messages arrived (control messages' buffers at any time): a
//     transport may place data by remote write into the buffer it knows is
//     free next, as RDMA WRITE with immediate does.
//   - PostSend and PostRecv queue work and return at once; the work's end is
//     reported later by Poll. SendControl sends a small message (at most
//     MaxControl bytes) from transport-owned memory and reports nothing.
//
// PostSend, PostRecv and SendControl may be called concurrently with Poll,
// but Poll must be called from one goroutine at a time.
type Conn interface {
	// SendBuf returns send buffer i. Its length is the buffer's capacity.
	SendBuf(i int) []byte
	// RecvBuf returns receive buffer i. Its length is the buffer's capacity.
	RecvBuf(i int) []byte
	// SendBufs returns how many send buffers the connection has.
	SendBufs() int
	// RecvBufs returns how many receive buffers the connection has.
	RecvBufs() int

	// PostSend queues the first n bytes of send buffer i as one message.
	PostSend(i, n int) error
	// SendControl sends p (at most MaxControl bytes) as one message. The
	// caller may reuse p as soon as SendControl returns.
	SendControl(ctx context.Context, p []byte) error
	// PostRecv makes receive buffer i available for the next message.
	PostRecv(i int) error

	// Poll waits until at least one work request has finished, stores up to
	// len(cs) completions in cs and returns how many it stored. It returns
	// an error when ctx ends or the connection has failed or closed.
	Poll(ctx context.Context, cs []Completion) (int, error)

	// Info describes the connection for summaries and statistics.
	Info() Info
	// Close waits briefly for queued sends to leave, then tears the
	// connection down and frees its buffers. It unblocks a pending Poll.
	Close() error
}

// Forwarder is implemented by connections that can send what arrived in
// another connection's receive buffers without copying it: a relay's
// connection to the next receiver (see pipe.RelayConfig).
type Forwarder interface {
	// Adopt makes up's receive buffers sendable on this connection with
	// PostForward. It fails where they cannot be (the relay then copies).
	Adopt(up Conn) error
	// PostForward queues the first n bytes of up's receive buffer i as one
	// message, as PostSend does for a send buffer; Poll reports it as
	// OpForward with Buf i and Len n, possibly after later ones. Buffer i
	// must stay unposted at up until then.
	PostForward(i, n int) error
}

// Window is implemented by a receiving connection that allocates (for
// RDMA, registers) its data receive buffers, its window, only when asked:
// until then only the spares are there and posted, so that a peer that
// has not authenticated itself or claimed the receiver costs it little,
// and a data message from it fails the connection. The engine opens the
// window once the sender has, before it welcomes it.
type Window interface {
	// OpenWindow allocates and posts the data receive buffers. It returns
	// what the sender's connection needs to send into them (see
	// WindowSetter), which the engine passes on in its welcome (under the
	// key's proof, with one), or nil.
	OpenWindow() ([]byte, error)
}

// WindowSetter is implemented by a sending connection that needs the
// description of the receiver's window that OpenWindow returned before it
// can send data (an RDMA ring's address and key).
type WindowSetter interface {
	SetWindow(desc []byte) error
}

// ProgressCounter is implemented by connections that can tell that the
// peer is alive while no whole message arrives: Progress returns a count
// that grows with the bytes arrived from it, counting messages still
// arriving, and with any sign the transport has that the peer reads what
// this side sends. The engine then takes any progress as a sign of life:
// on a slow link one large message can take longer than the idle timeout
// in either direction, with the peer's heartbeats and credits queued
// behind it (TCP).
type ProgressCounter interface {
	Progress() int64
}

// MaxControl is the largest message SendControl accepts, and the size of
// the receive buffers a sender posts for the receiver's control messages.
const MaxControl = 256

// Info describes an established connection.
type Info struct {
	Transport string // "tcp", "rdma" or "mem"
	Device    string // RDMA device name (names, comma-separated, when striped over several), empty for other transports
	Port      int    // RDMA port number, 0 for other transports
	DataPath  string // how RDMA data travels: "write" (with immediate) or "send"; empty for other transports
	QPs       int    // RDMA queue pairs carrying the stream; 0 for other transports
	Write     int    // bytes per RDMA WRITE when a data message is split into several; 0 when it is one
	Tuned     string // why the link's speed chose QPs and Write, e.g. "a 400 Gb/s link"; empty when it did not
	Local     string // local address
	Remote    string // peer address
	Chunk     int    // negotiated data payload per message, in bytes
	Depth     int    // negotiated buffers per side (Depth-1 data messages in flight)
	Pinned    int64  // bytes of buffer memory registered (pinned) by this side; 0 where nothing is
	Copies    bool   // the CPU copies each message out as it is posted (a socket's write), rather than a NIC reading the buffer
}

// ErrClosed is returned by Poll after Close.
var ErrClosed = errors.New("connection closed")
