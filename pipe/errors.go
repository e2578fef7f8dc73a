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
