package rdma

import (
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// localError marks a setup failure caused by this host's resources (memory,
// locked-memory limit, device resources): errors.Is(err, conn.ErrLocal)
// holds for it, and its message is that of the cause alone.
type localError struct{ err error }

func (e *localError) Error() string   { return e.err.Error() }
func (e *localError) Unwrap() []error { return []error{e.err, conn.ErrLocal} }

// local marks err, if not nil, as caused by this host (see localError).
func local(err error) error {
	if err == nil {
		return nil
	}
	return &localError{err}
}
