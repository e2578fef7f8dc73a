package rdma

import (
	"syscall"
	"testing"
)

func TestPollError(t *testing.T) {
	tests := []struct {
		rc   int
		eno  syscall.Errno
		want string
	}{
		{-1, syscall.EIO, "ibv_poll_cq failed (returned -1): input/output error"},
		{-2, 0, "ibv_poll_cq failed (returned -2)"},
		{-22, syscall.EINVAL, "ibv_poll_cq failed (returned -22): invalid argument"},
	}
	for _, tt := range tests {
		if got := pollError(tt.rc, tt.eno); got != tt.want {
			t.Errorf("pollError(%d, %d) = %q, want %q", tt.rc, tt.eno, got, tt.want)
		}
	}
}
