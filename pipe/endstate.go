package pipe

import (
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// endState is where a receiver's stream stands on its way to its end.
// The receive loop owns it (receiver.end): it applies what it sees
// itself and what the writer and the relay report (see streamEnd.next).
type endState uint8

const (
	stHandshaking endState = iota // the first sender's handshake, then the output's opening
	stStreaming                   // data arrives and is written
	stEnding                      // the end went to the writer, which verifies it, awaits the relay's confirmation and confirms
	stHungUp                      // the sender went after the end (it does once confirmed): the writer's verdict decides
	stDraining                    // the sender was lost before the end and another may take over: the writer writes what arrived
	stRejoining                   // drained: the loop awaits a sender from ReceiveConfig.Rejoin
	stClosing                     // the stream fails, and the loop stops the writer: confirmed only if the writer already confirmed
	stConfirmed                   // the whole stream was confirmed to the sender
	stFailed                      // the stream failed
	endStates                     // how many there are
)

var endStateNames = [endStates]string{"handshaking", "streaming", "ending", "hung up", "draining", "rejoining", "closing", "confirmed", "failed"}

func (s endState) String() string {
	if s < endStates {
		return endStateNames[s]
	}
	return fmt.Sprintf("endState(%d)", uint8(s))
}

// final reports whether the stream's end is decided.
func (s endState) final() bool { return s == stConfirmed || s == stFailed }

// receiving reports whether the receive loop handles the sender's
// messages in s.
func (s endState) receiving() bool { return s == stStreaming || s == stEnding }

// writing reports whether the writer runs in s (and its verdict is yet to
// come).
func (s endState) writing() bool {
	return s == stStreaming || s == stEnding || s == stHungUp || s == stDraining || s == stClosing
}

// endEvent is something that happens to a receiver's stream: the relay
// and the writer report theirs (receiver.report), the receive loop sees
// the others itself (and that the writer is stuck).
type endEvent uint8

const (
	evWelcomed        endEvent = iota // the handshake completed and the output is open: the stream begins
	evData                            // a data message arrived in order
	evEnd                             // the end-of-stream message arrived in order
	evRelayConfirmed                  // the next receiver confirmed the stream (the relay)
	evRelayFailed                     // the stream to the next receiver failed (the relay)
	evWriterConfirmed                 // the writer verified the stream and confirmed it to the sender
	evWriterDrained                   // the writer wrote what arrived from a lost sender
	evWriterFailed                    // the writer failed: the output, a check of the stream, the relay's confirmation
	evWriterStopped                   // the writer stopped at the end of the stream's context
	evWriterStuck                     // the writer did not stop within workerGrace
	evRejoin                          // a sender from ReceiveConfig.Rejoin took the stream over
	evNoRejoin                        // no sender took the stream over
	evPeerGone                        // the sender aborted, its connection failed, or it fell silent
	evAbort                           // this receiver gives up: the sender broke the protocol, sending to it failed, the output did not open
	evCancel                          // the caller ended the stream (a signal)
	endEvents                         // how many there are
)

var endEventNames = [endEvents]string{"welcomed", "data", "end", "relay confirmed", "relay failed", "writer confirmed", "writer drained", "writer failed", "writer stopped", "writer stuck", "rejoin", "no rejoin", "peer gone", "abort", "cancel"}

func (e endEvent) String() string {
	if e < endEvents {
		return endEventNames[e]
	}
	return fmt.Sprintf("endEvent(%d)", uint8(e))
}

// wakes reports whether a reporter of e wakes the receive loop from its
// wait on the sender (see receiver.report): e ends the stream wherever
// the loop waits. The others change nothing where it waits (the relay's
// confirmation), come once it no longer waits on the sender (drained),
// or once its wait has ended anyway (stopped).
func (e endEvent) wakes() bool {
	return e == evWriterConfirmed || e == evWriterFailed || e == evRelayFailed
}

// streamEnd is a receiver's stream on its way to its end: its state, why
// it fails, and what the next event is judged by.
type streamEnd struct {
	state  endState
	err    error // why the stream failed (stFailed), or fails unless the writer confirmed (stClosing)
	ended  bool  // the current sender's end-of-stream message arrived
	rejoin bool  // another sender may take over a lost one (ReceiveConfig.Rejoin)
}

// next returns the stream after event e, which err describes where it is
// a failure. A final state stays as it is; an event that cannot happen in
// a state fails the stream as a bug.
func (s streamEnd) next(e endEvent, err error) streamEnd {
	if s.state.final() {
		return s
	}
	switch e {
	case evData, evEnd:
		return s.arrived(e)
	case evWriterConfirmed, evWriterDrained, evWriterFailed, evWriterStopped, evWriterStuck:
		return s.written(e, err)
	case evWelcomed, evRejoin, evNoRejoin:
		return s.handshaken(e, err)
	}
	return s.failed(e, err)
}

// arrived is the stream after a data or end message.
func (s streamEnd) arrived(e endEvent) streamEnd {
	switch {
	case s.state == stStreaming && e == evEnd:
		s.state, s.ended = stEnding, true
	case s.state == stStreaming:
	case s.state == stEnding:
		s.state, s.err = stClosing, conn.Errorf(conn.KindIntegrity, "receive", "the sender sent a message after the end of the stream")
	default:
		return s.bug(e)
	}
	return s
}

// written is the stream after the writer's verdict.
func (s streamEnd) written(e endEvent, err error) streamEnd {
	if !s.state.writing() {
		return s.bug(e)
	}
	switch {
	case e == evWriterConfirmed && s.ended:
		s.state, s.err = stConfirmed, nil
	case e == evWriterConfirmed:
		return s.bug(e)
	case s.state == stClosing: // the loop's reason wins
		s.state = stFailed
	case e == evWriterDrained && s.state == stDraining:
		s.state = stRejoining
	case e == evWriterDrained, e == evWriterStuck:
		return s.bug(e)
	default:
		s.state, s.err = stFailed, because(e, err)
	}
	return s
}

// handshaken is the stream after a handshake: the first sender's, or a
// rejoin's.
func (s streamEnd) handshaken(e endEvent, err error) streamEnd {
	switch {
	case e == evWelcomed && s.state == stHandshaking:
		s.state = stStreaming
	case e == evRejoin && s.state == stRejoining:
		s.state, s.ended = stStreaming, false
	case e == evNoRejoin && s.state == stRejoining:
		s.state, s.err = stFailed, because(e, err)
	default:
		return s.bug(e)
	}
	return s
}

// failed is the stream after a failure of the relay, the sender, the
// receive loop or the caller.
func (s streamEnd) failed(e endEvent, err error) streamEnd {
	switch {
	case e == evRelayConfirmed:
		if !s.ended || s.state != stEnding && s.state != stHungUp && s.state != stClosing {
			return s.bug(e)
		}
	case s.state == stClosing:
	case e == evPeerGone && s.state == stEnding:
		s.state = stHungUp
	case e == evPeerGone && s.state == stStreaming && s.rejoin:
		s.state = stDraining
	case (e == evPeerGone || e == evAbort) && !s.state.receiving() && s.state != stHandshaking:
		return s.bug(e)
	case s.state.writing():
		s.state, s.err = stClosing, because(e, err)
	default: // no writer to stop
		s.state, s.err = stFailed, because(e, err)
	}
	return s
}

// because is err, the reason for failure event e, or a bug if there is
// none.
func because(e endEvent, err error) error {
	if err == nil {
		return conn.Errorf(conn.KindInternal, "", "bug: %v without a reason (please report it with this message)", e)
	}
	return err
}

// bug fails the stream after an event that cannot happen in its state:
// with the reason it already fails for (stClosing), which wins, else as
// a bug.
func (s streamEnd) bug(e endEvent) streamEnd {
	if s.err == nil {
		s.err = conn.Errorf(conn.KindInternal, "", "bug: %v while the stream is %v (please report it with this message)", e, s.state)
	}
	s.state = stFailed
	return s
}
