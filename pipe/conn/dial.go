package conn

import "context"

// Dialer connects a sender to a receiver. Dial sends proposal to the
// receiver, which answers with the negotiated Params (see Negotiate); the
// returned Conn is sized from the proposal (SenderLayout), which is never
// smaller than the answer, and its Info reports the answer.
type Dialer interface {
	Dial(ctx context.Context, addr string, proposal Params) (Conn, error)
}

// Listener accepts senders for a receiver. Accept negotiates the Params of
// each connection against the listener's own and sizes the returned Conn
// with ReceiverLayout.
type Listener interface {
	Accept(ctx context.Context) (Conn, error)
	// SetBusy says whether the receiver is serving a stream. While it is,
	// the listener refuses connect requests as busy (Params.Busy in the
	// refusal, an error of kind KindBusy at the dialer) before it
	// allocates or registers anything for them.
	SetBusy(busy bool)
	// Addr returns the address the listener is bound to.
	Addr() string
	// Close stops listening and unblocks Accept.
	Close() error
}
