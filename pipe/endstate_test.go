package pipe

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// endWant is what one event makes of a stream's end in the table below:
// the next state, and whose reason it fails with.
type endWant struct {
	state endState
	why   byte // 'e': the event's, 's': the state's, 'i': an integrity failure, 'b': a bug, 0: none
}

// Shorthands for the table: the states that an event leads to, failing
// with the event's reason (E), the state's (S) or as a bug (bugged).
var (
	bugged   = endWant{stFailed, 'b'}
	failedE  = endWant{stFailed, 'e'}
	failedS  = endWant{stFailed, 's'}
	closingE = endWant{stClosing, 'e'}
	closingS = endWant{stClosing, 's'}
	closingI = endWant{stClosing, 'i'}
	stay     = endWant{state: endStates} // the state as it was
)

// to is the shorthand for an event that leads to state s, without a
// reason to fail.
func to(s endState) endWant { return endWant{state: s} }

// endCase is a stream's end before an event: the state and its flags.
type endCase struct {
	name string
	from streamEnd
	want [endEvents]endWant
}

// endTable holds every state that is not final (the final ones are
// checked below) with the flags it can have, and what each event makes
// of it.
var endTable = []endCase{
	{"handshaking", streamEnd{state: stHandshaking}, [endEvents]endWant{
		evWelcomed: to(stStreaming), evData: bugged, evEnd: bugged,
		evRelayConfirmed: bugged, evRelayFailed: failedE,
		evWriterConfirmed: bugged, evWriterDrained: bugged, evWriterFailed: bugged, evWriterStopped: bugged, evWriterStuck: bugged,
		evRejoin: bugged, evNoRejoin: bugged,
		evPeerGone: failedE, evAbort: failedE, evCancel: failedE,
	}},
	{"streaming", streamEnd{state: stStreaming}, [endEvents]endWant{
		evWelcomed: bugged, evData: stay, evEnd: to(stEnding),
		evRelayConfirmed: bugged, evRelayFailed: closingE,
		evWriterConfirmed: bugged, evWriterDrained: bugged, evWriterFailed: failedE, evWriterStopped: failedE, evWriterStuck: bugged,
		evRejoin: bugged, evNoRejoin: bugged,
		evPeerGone: closingE, evAbort: closingE, evCancel: closingE,
	}},
	{"streaming, with rejoin", streamEnd{state: stStreaming, rejoin: true}, [endEvents]endWant{
		evWelcomed: bugged, evData: stay, evEnd: to(stEnding),
		evRelayConfirmed: bugged, evRelayFailed: closingE,
		evWriterConfirmed: bugged, evWriterDrained: bugged, evWriterFailed: failedE, evWriterStopped: failedE, evWriterStuck: bugged,
		evRejoin: bugged, evNoRejoin: bugged,
		evPeerGone: to(stDraining), evAbort: closingE, evCancel: closingE,
	}},
	{"ending", streamEnd{state: stEnding, ended: true, rejoin: true}, [endEvents]endWant{
		evWelcomed: bugged, evData: closingI, evEnd: closingI,
		evRelayConfirmed: stay, evRelayFailed: closingE,
		evWriterConfirmed: to(stConfirmed), evWriterDrained: bugged, evWriterFailed: failedE, evWriterStopped: failedE, evWriterStuck: bugged,
		evRejoin: bugged, evNoRejoin: bugged,
		evPeerGone: to(stHungUp), evAbort: closingE, evCancel: closingE,
	}},
	{"hung up", streamEnd{state: stHungUp, ended: true}, [endEvents]endWant{
		evWelcomed: bugged, evData: bugged, evEnd: bugged,
		evRelayConfirmed: stay, evRelayFailed: closingE,
		evWriterConfirmed: to(stConfirmed), evWriterDrained: bugged, evWriterFailed: failedE, evWriterStopped: failedE, evWriterStuck: bugged,
		evRejoin: bugged, evNoRejoin: bugged,
		evPeerGone: bugged, evAbort: bugged, evCancel: closingE,
	}},
	{"draining", streamEnd{state: stDraining, rejoin: true}, [endEvents]endWant{
		evWelcomed: bugged, evData: bugged, evEnd: bugged,
		evRelayConfirmed: bugged, evRelayFailed: closingE,
		evWriterConfirmed: bugged, evWriterDrained: to(stRejoining), evWriterFailed: failedE, evWriterStopped: failedE, evWriterStuck: bugged,
		evRejoin: bugged, evNoRejoin: bugged,
		evPeerGone: bugged, evAbort: bugged, evCancel: closingE,
	}},
	{"rejoining", streamEnd{state: stRejoining, rejoin: true}, [endEvents]endWant{
		evWelcomed: bugged, evData: bugged, evEnd: bugged,
		evRelayConfirmed: bugged, evRelayFailed: failedE,
		evWriterConfirmed: bugged, evWriterDrained: bugged, evWriterFailed: bugged, evWriterStopped: bugged, evWriterStuck: bugged,
		evRejoin: to(stStreaming), evNoRejoin: failedE,
		evPeerGone: bugged, evAbort: bugged, evCancel: failedE,
	}},
	{"closing before the end", streamEnd{state: stClosing, err: errClosing}, [endEvents]endWant{
		evWelcomed: failedS, evData: failedS, evEnd: failedS,
		evRelayConfirmed: failedS, evRelayFailed: closingS,
		evWriterConfirmed: failedS, evWriterDrained: failedS, evWriterFailed: failedS, evWriterStopped: failedS, evWriterStuck: failedS,
		evRejoin: failedS, evNoRejoin: failedS,
		evPeerGone: closingS, evAbort: closingS, evCancel: closingS,
	}},
	{"closing after the end", streamEnd{state: stClosing, err: errClosing, ended: true}, [endEvents]endWant{
		evWelcomed: failedS, evData: failedS, evEnd: failedS,
		evRelayConfirmed: closingS, evRelayFailed: closingS,
		evWriterConfirmed: to(stConfirmed), evWriterDrained: failedS, evWriterFailed: failedS, evWriterStopped: failedS, evWriterStuck: failedS,
		evRejoin: failedS, evNoRejoin: failedS,
		evPeerGone: closingS, evAbort: closingS, evCancel: closingS,
	}},
}

var (
	errClosing = errors.New("the state's reason")
	errEvent   = errors.New("the event's reason")
)

// TestEndTable checks what every event makes of every state that is not
// final, and that the table covers every state.
func TestEndTable(t *testing.T) {
	t.Parallel()
	covered := map[endState]bool{}
	for _, c := range endTable {
		covered[c.from.state] = true
		for e := range endEvents {
			got := c.from.next(e, errEvent)
			want := c.want[e]
			if want.state == endStates {
				want.state = c.from.state
			}
			if got.state != want.state {
				t.Errorf("%s, %v: state %v, want %v", c.name, e, got.state, want.state)
				continue
			}
			if err := checkWhy(got.err, want.why); err != "" {
				t.Errorf("%s, %v: %s", c.name, e, err)
			}
			if got.rejoin != c.from.rejoin {
				t.Errorf("%s, %v: rejoin changed", c.name, e)
			}
		}
	}
	for s := range endStates {
		if !covered[s] && !s.final() {
			t.Errorf("state %v is not in the table", s)
		}
	}
}

// checkWhy says what is wrong with err as a failure's reason of kind why
// (see endWant), or "".
func checkWhy(err error, why byte) string {
	var ok bool
	switch why {
	case 0:
		ok = err == nil
	case 'e':
		ok = err == errEvent
	case 's':
		ok = err == errClosing
	case 'i':
		ok = conn.KindOf(err) == conn.KindIntegrity && strings.Contains(err.Error(), "after the end")
	case 'b':
		ok = conn.KindOf(err) == conn.KindInternal && strings.Contains(err.Error(), "bug:")
	}
	if ok {
		return ""
	}
	return "reason " + errorText(err) + ", want kind " + string(why)
}

func errorText(err error) string {
	if err == nil {
		return "none"
	}
	return "\"" + err.Error() + "\""
}

// TestEndFinal checks that the final states stay as they are, whatever
// happens.
func TestEndFinal(t *testing.T) {
	t.Parallel()
	for _, from := range []streamEnd{{state: stConfirmed, ended: true}, {state: stFailed, err: errClosing}} {
		for e := range endEvents {
			if got := from.next(e, errEvent); got != from {
				t.Errorf("%v, %v: %+v, want it unchanged", from.state, e, got)
			}
		}
	}
}

// TestEndWithoutReason checks that a failure reported without a reason
// fails the stream as a bug rather than with none.
func TestEndWithoutReason(t *testing.T) {
	t.Parallel()
	for _, c := range endTable {
		for e := range endEvents {
			if got := c.from.next(e, nil); got.state == stFailed && got.err == nil || got.state == stClosing && got.err == nil {
				t.Errorf("%s, %v: %v without a reason", c.name, e, got.state)
			}
		}
	}
}

// TestEndWakes checks that a report that wakes the receive loop leaves
// no state in which the loop waits on the sender: its wait stays woken.
func TestEndWakes(t *testing.T) {
	t.Parallel()
	waits := map[endState]bool{stHandshaking: true, stStreaming: true, stEnding: true, stRejoining: true}
	for _, c := range endTable {
		if !waits[c.from.state] {
			continue
		}
		for e := range endEvents {
			if got := c.from.next(e, errEvent); e.wakes() && waits[got.state] {
				t.Errorf("%s, %v wakes the loop into %v, where it waits again", c.name, e, got.state)
			}
		}
	}
}

// TestEndNames checks that every state and event has its own name.
func TestEndNames(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for s := range endStates + 1 {
		if n := s.String(); n == "" || seen[n] {
			t.Errorf("state %d: name %q empty or twice", s, n)
		} else {
			seen[n] = true
		}
	}
	for e := range endEvents + 1 {
		if n := e.String(); n == "" || seen[n] && e < endEvents {
			t.Errorf("event %d: name %q empty or twice", e, n)
		} else {
			seen[n] = true
		}
	}
}

// FuzzEnd applies any sequence of events to a stream's end, beginning at
// the handshake, and checks what must hold after each.
func FuzzEnd(f *testing.F) {
	f.Add(false, []byte{byte(evWelcomed), byte(evData), byte(evEnd), byte(evRelayConfirmed), byte(evWriterConfirmed)})
	f.Add(true, []byte{byte(evWelcomed), byte(evData), byte(evPeerGone), byte(evWriterDrained), byte(evRejoin), byte(evEnd), byte(evPeerGone), byte(evWriterConfirmed)})
	f.Add(true, []byte{byte(evWelcomed), byte(evEnd), byte(evCancel), byte(evRelayFailed), byte(evWriterStuck)})
	f.Add(false, []byte{byte(evWelcomed), byte(evEnd), byte(evData), byte(evWriterConfirmed)})
	f.Fuzz(func(t *testing.T, rejoin bool, events []byte) {
		s := streamEnd{state: stHandshaking, rejoin: rejoin}
		var firstErr error // the first failure's reason, once the stream fails
		sawEnd := false    // an end arrived since the current sender began
		for i, b := range events {
			e := endEvent(b % byte(endEvents))
			err := errors.New(e.String())
			prev := s
			s = s.next(e, err)
			switch {
			case e == evWelcomed && prev.state == stHandshaking, e == evRejoin && prev.state == stRejoining:
				sawEnd = false
			case e == evEnd && prev.state.receiving():
				sawEnd = true
			}
			if msg := checkEnd(prev, e, s, sawEnd); msg != "" {
				t.Fatalf("event %d, %v after %v: %s", i, e, prev.state, msg)
			}
			if firstErr == nil && (s.state == stClosing || s.state == stFailed) {
				firstErr = s.err
			}
			if firstErr != nil && s.state != stConfirmed && s.err != firstErr {
				t.Fatalf("event %d, %v: the reason changed from %v to %v", i, e, firstErr, s.err)
			}
		}
	})
}

// checkEnd says what is wrong with s, the stream after event e in prev,
// or "". sawEnd says whether the current sender's end arrived.
func checkEnd(prev streamEnd, e endEvent, s streamEnd, sawEnd bool) string {
	switch {
	case s.state >= endStates:
		return "no such state"
	case prev.state.final() && s != prev:
		return "a final state changed"
	case s.rejoin != prev.rejoin:
		return "rejoin changed"
	case (s.state == stFailed || s.state == stClosing) && s.err == nil:
		return "failing without a reason"
	case s.state == stConfirmed && s.err != nil:
		return "confirmed with a reason to fail"
	case s.state == stConfirmed && !prev.state.final() && (e != evWriterConfirmed || !sawEnd):
		return "confirmed without the writer's confirmation of an end that arrived"
	case s.ended != sawEnd && s.state != stFailed:
		return "ended does not say whether the end arrived"
	case (s.state == stDraining || s.state == stRejoining) && !s.rejoin:
		return "draining without a rejoin"
	case (s.state == stEnding || s.state == stHungUp) && !s.ended:
		return "ending before the end arrived"
	case (s.state == stStreaming || s.state == stDraining || s.state == stRejoining) && s.ended:
		return "streaming after the end arrived"
	}
	return ""
}
