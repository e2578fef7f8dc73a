package remote

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// StatusWait bounds the wait for the remote side putting the copy in
// place after the stream.
const StatusWait = 5 * time.Minute

// Done checks the remote side's last status line after a stream of
// n bytes, which this side has "sent" or "received": it must say "ok n".
func Done(host string, st proto.Status, n int64, verb string) error {
	if err := Failure(host, st); err != nil {
		return err
	}
	if st.Kind != "ok" || st.N != n {
		return conn.Errorf(conn.KindIntegrity, "after the stream", "the remote side reports %s %d, %d bytes were %s", st.Kind, st.N, n, verb)
	}
	return nil
}

// Failure returns the remote side's failure as an error of the kind
// its exit code stands for, or nil if st is not a failure.
func Failure(host string, st proto.Status) error {
	if st.Kind != "fail" {
		return nil
	}
	return &conn.Error{Kind: KindOfCode(int(st.N)), Op: "remote side on " + host, Err: errors.New(strconv.Quote(st.Msg))}
}

// KindOfCode maps an exit code back to the kind of error it stands for.
func KindOfCode(code int) conn.Kind {
	kinds := map[int]conn.Kind{2: conn.KindUsage, 3: conn.KindSetup, 4: conn.KindAborted, 5: conn.KindIntegrity, 6: conn.KindAuth, 7: conn.KindNoRDMA}
	if k, ok := kinds[code]; ok {
		return k
	}
	return conn.KindInternal
}

// cannotConnectOp starts a remote side's failure to connect to the host
// at addr (see CannotConnect).
func cannotConnectOp(addr string) string { return "cannot connect to " + addr }

// CannotConnect is a remote side's failure to connect to the host at addr
// (err), the next one of a chain or the receiving host of a copy between
// two remote hosts, which the local side reports as the pair's (see
// LinkFailed).
func CannotConnect(addr string, err error) error {
	return &conn.Error{Kind: conn.KindSetup, Op: cannotConnectOp(addr), Err: err}
}

// CouldNotConnect returns why st, a remote side's status, says it could
// not connect to addr (see CannotConnect), and whether it says so.
func CouldNotConnect(st proto.Status, addr string) (string, bool) {
	if st.Kind != "fail" || KindOfCode(int(st.N)) != conn.KindSetup {
		return "", false
	}
	return strings.CutPrefix(st.Msg, cannotConnectOp(addr)+": ")
}

// LinkFailed is the failure st of the remote side on from, which was to
// connect to the host to at addr: when it says it could not connect
// there, an error that names the pair and says why; else the remote
// side's failure as it is.
func LinkFailed(from, to, addr string, st proto.Status) error {
	why, ok := CouldNotConnect(st, addr)
	if !ok {
		return Failure(from, st)
	}
	return &conn.Error{Kind: conn.KindSetup, Op: from + " cannot connect to " + to + " at " + addr, Err: errors.New(strconv.Quote(why))}
}
