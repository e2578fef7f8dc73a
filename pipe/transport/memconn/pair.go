// Package memconn is an in-memory conn.Conn pair for engine tests. Messages
// are copied from send buffers to posted receive buffers, as a NIC would;
// faults can be injected into either direction; and each end checks that
// the engine keeps to its credits, failing the connection and counting a
// violation when a message arrives with no receive buffer posted for it.
package memconn

import (
	"sync"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Faults are the failures a pair injects into the messages from the sender
// end to the receiver end (PostSend and SendControl alike, counted from 1).
// The zero value injects none.
type Faults struct {
	// DropAt silently drops message DropAt; its sender still sees it sent.
	DropAt int
	// CorruptAt flips the lowest bit of the first byte of message CorruptAt
	// (a payload byte of a data message); an empty message arrives intact.
	CorruptAt int
	// CutAt delivers the messages before CutAt, then fails the connection
	// on both ends, as if the peer had vanished.
	CutAt int
	// Delay is how long each message takes to arrive.
	Delay time.Duration
	// ReorderForwards reports the completions of each pair of PostForward
	// messages in reverse order, as a NIC sending over several queue pairs
	// may (the messages themselves still arrive in order).
	ReorderForwards bool
	// Reverse are the faults for the messages from the receiver end to the
	// sender end. Its own Reverse is ignored.
	Reverse *Faults
}

// Stats count what happened at one end of a pair.
type Stats struct {
	Sent     int // messages this end sent: PostSend and SendControl
	Received int // messages delivered into this end's receive buffers
	// MaxInFlight is the most messages this end had sent whose receive
	// buffer the peer had not re-posted yet. An engine that keeps to its
	// credits keeps it at most the peer's RecvBufs.
	MaxInFlight int
	// MaxDataInFlight is MaxInFlight counting PostSend messages only; a
	// sender that keeps to its credits keeps it at most the negotiated Depth.
	MaxDataInFlight int
	// Violations counts messages that reached this end with no posted
	// receive buffer or too large for one, and receive buffers re-posted
	// out of order or while an adopting end still sends from them: engine
	// bugs.
	Violations int
}

// Pair negotiates like a real transport and returns two connected ends: the
// sender sized by conn.SenderLayout(proposal), the receiver by
// conn.ReceiverLayout of the result of conn.Negotiate(receiverLocal,
// proposal), whose error it returns. f says which faults to inject. Closing
// either end stops both ends' goroutines.
func Pair(proposal, receiverLocal conn.Params, f Faults) (sender, receiver *Conn, err error) {
	if err := receiverLocal.Validate(); err != nil {
		return nil, nil, &conn.Error{Kind: conn.KindUsage, Op: "listen on mem", Err: err}
	}
	p, err := conn.Negotiate(receiverLocal, proposal)
	if err != nil {
		return nil, nil, err
	}
	var reverse Faults
	if f.Reverse != nil {
		reverse = *f.Reverse
	}
	mu := new(sync.Mutex)
	sender = newConn(mu, "mem:sender", conn.SenderLayout(proposal), p, f)
	receiver = newConn(mu, "mem:receiver", conn.ReceiverLayout(p), p, reverse)
	sender.peer, receiver.peer = receiver, sender
	sender.info.Remote, receiver.info.Remote = receiver.name, sender.name
	go sender.deliverLoop()
	go receiver.deliverLoop()
	return sender, receiver, nil
}
