package command

import (
	"errors"
	"fmt"
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
