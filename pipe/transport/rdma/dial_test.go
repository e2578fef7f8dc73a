package rdma

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestMPAFailed checks which failed connects Dial tries again: only an
// iWARP device's connect error with EINVAL, what siw reports when the
// listener's first message overtook the MPA reply.
func TestMPAFailed(t *testing.T) {
	for _, tc := range []struct {
		iwarp, connectError bool
		err                 error
		want                bool
	}{
		{true, true, syscall.EINVAL, true},
		{true, true, fmt.Errorf("wrapped: %w", syscall.EINVAL), true},
		{true, true, syscall.ECONNREFUSED, false}, // nothing listening
		{true, true, syscall.ETIMEDOUT, false},    // no MPA reply at all
		{true, false, syscall.EINVAL, false},      // a rejection or another event
		{false, true, syscall.EINVAL, false},      // RoCE, InfiniBand
		{true, true, errors.New("status 1"), false},
	} {
		if got := mpaFailed(tc.iwarp, tc.connectError, tc.err); got != tc.want {
			t.Errorf("mpaFailed(iwarp %v, connect error %v, %v) = %v, want %v", tc.iwarp, tc.connectError, tc.err, got, tc.want)
		}
	}
}
