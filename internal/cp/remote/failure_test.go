package remote

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
)

// TestLinkFailed: a remote side's setup failure names the pair only when
// it says it could not connect to the very address it was to connect
// to; any other failure (a refused handshake, a version mismatch, an
// address it was never given, another exit code) is the remote side's
// own, named by its host, and says nothing of connecting.
func TestLinkFailed(t *testing.T) {
	fail := func(code int64, msg string) proto.Status {
		return proto.Status{Kind: "fail", N: code, Msg: msg, Valid: true}
	}
	const addr = "10.0.0.2:4000"
	cases := []struct {
		name string
		st   proto.Status
		code int
		says string
	}{
		{"could not connect", fail(3, CannotConnect(addr, errors.New("no route to host")).Error()), command.ExitSetup, `h1 cannot connect to h2 at 10.0.0.2:4000: "no route to host"`},
		{"the handshake refused", fail(3, "receiver refused the connection: busy"), command.ExitSetup, `remote side on h1: "receiver refused the connection: busy"`},
		{"another version", fail(3, "handshake: unexpected message"), command.ExitSetup, `remote side on h1: "handshake: unexpected message"`},
		{"another address", fail(3, cannotConnectOp("10.9.9.9:1")+": refused"), command.ExitSetup, `remote side on h1: "cannot connect to 10.9.9.9:1: refused"`},
		{"another port", fail(3, cannotConnectOp("10.0.0.2:40000")+": refused"), command.ExitSetup, `remote side on h1: "cannot connect to 10.0.0.2:40000`},
		{"not a setup failure", fail(6, cannotConnectOp(addr)+": wrong key"), command.ExitAuth, `remote side on h1: "cannot connect`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := LinkFailed("h1", "h2", addr, tc.st)
			if got := command.ExitCode(err); got != tc.code || err == nil || !strings.HasPrefix(err.Error(), tc.says) {
				t.Fatalf("exit %d (%v), want %d starting %q", got, err, tc.code, tc.says)
			}
		})
	}
}
