// Package pipe is the rdmapipe streaming engine: it moves a byte stream from
// an io.Reader on one host to an io.Writer on another over a conn.Conn, a
// small interface with the semantics of an RDMA reliable-connected queue
// pair (package pipe/conn).
//
// Credits, framing, end-of-stream, abort, authentication and the stream
// checksum live here, once. Transports (TCP, RDMA verbs, in-memory) only move
// messages between buffers; see the sub-packages of pipe/transport. The
// message encodings are in pipe/internal/wire, the key's proofs and MACs in
// pipe/internal/auth, reading the input and writing the output in
// pipe/internal/source and pipe/internal/sink.
//
// The roles: Send's origin streams its input with a sender (over a link
// when it repairs), Receive's receiver writes the stream and may relay it
// on with a relay (whose sender streams to the next receiver) or be taken
// over by a link's sender after its own sender was lost. SendConfig,
// ReceiveConfig and its RelayConfig configure them.
package pipe
