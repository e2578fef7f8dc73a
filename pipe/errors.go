package pipe

import (
	"errors"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// wrap returns err as a *conn.Error of kind k for operation op, keeping
// the kind of a *conn.Error already in err's chain.
func wrap(k conn.Kind, op string, err error) error {
	var e *conn.Error
	if errors.As(err, &e) {
		k = e.Kind
	}
	return &conn.Error{Kind: k, Op: op, Err: err}
}

// Retryable says whether a Send that returned st and err may be tried
// again with the same input: it failed before reading any of it
// (Stats.Began), refused, reset, closed or busy, which another attempt may
// mend, not for a wrong key or bad parameters.
func Retryable(st Stats, err error) bool {
	switch conn.KindOf(err) {
	case conn.KindSetup, conn.KindAborted, conn.KindBusy:
		return !st.Began
	}
	return false
}

// shortName is a host's address as errors name it: at most 64 bytes, so
// that what failed still fits in an abort message when the address is
// long (up to maxChainHost bytes).
func shortName(addr string) string {
	const most = 64
	if len(addr) <= most {
		return addr
	}
	return addr[:most-3] + "..."
}
