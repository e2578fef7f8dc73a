package command

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

func TestExitCode(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{errors.New("plain"), ExitInternal},
		{Usagef("bad"), ExitUsage},
		{conn.Errorf(conn.KindSetup, "connect", "refused"), ExitSetup},
		{conn.Errorf(conn.KindBusy, "", "busy"), ExitSetup},
		{conn.Errorf(conn.KindAborted, "", "cut"), ExitAborted},
		{conn.Errorf(conn.KindIntegrity, "", "crc"), ExitIntegrity},
		{conn.Errorf(conn.KindAuth, "", "key"), ExitAuth},
		{conn.Errorf(conn.KindNoRDMA, "", "no device"), ExitNoRDMA},
		{errors.Join(conn.Errorf(conn.KindAborted, "", "cut"), pipe.ErrStuck), ExitAborted},
		{&Partial{Failed: []string{"b"}, Hosts: 3}, ExitPartial},
		{fmt.Errorf("copy: %w", &Partial{Failed: []string{"b"}, Hosts: 3}), ExitPartial},
		{&Unasked{Host: "h", Claim: ".bashrc", Why: "asked for f"}, ExitUnasked},
		{&conn.Error{Kind: conn.KindAborted, Op: "write output", Err: fmt.Errorf("extract: %w", &Unasked{Host: "h", Claim: "x/y", Why: "outside"})}, ExitUnasked},
	}
	for _, tc := range cases {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestMessage checks that errors read in the user's words: a file's or a
// socket's error without the system call's name.
func TestMessage(t *testing.T) {
	denied := &fs.PathError{Op: "lstat", Path: "/root/d1", Err: syscall.EACCES}
	cases := []struct {
		err  error
		want string
	}{
		{errors.New("plain"), "plain"},
		{conn.Errorf(conn.KindSetup, "", "destination %w", denied), "destination /root/d1: permission denied"},
		{fmt.Errorf("write output: %w", os.NewSyscallError("write", syscall.EPIPE)), "write output: broken pipe"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, "dial tcp: connection refused"},
		{fmt.Errorf("not wrapped: %v", denied), "not wrapped: lstat /root/d1: permission denied"},
	}
	for _, tc := range cases {
		if got := Message(tc.err); got != tc.want {
			t.Errorf("Message(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
