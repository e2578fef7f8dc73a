// Package app holds what the rdmasend and rdmarecv commands share: their
// flags, transport selection, key loading, signals, reporting and exit codes.
package app

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Exit codes, documented in README.md and in each command's help.
const (
	ExitOK        = 0 // the whole stream was delivered and written
	ExitInternal  = 1 // a bug or an unexpected local failure
	ExitUsage     = 2 // bad flags or arguments
	ExitSetup     = 3 // could not connect, listen, allocate or register memory; receiver busy
	ExitAborted   = 4 // the stream ended early: peer abort or loss, interrupted, input/output failure
	ExitIntegrity = 5 // the stream arrived damaged: length, checksum or sequence mismatch
	ExitAuth      = 6 // wrong or missing shared key
	ExitNoRDMA    = 7 // RDMA was requested (--transport rdma) but is not available
)

// exitCodesHelp is the exit-code table shown in both commands' help.
const exitCodesHelp = `EXIT CODES:
   0  success: every byte was delivered and written
   1  internal error
   2  usage error (bad flags or arguments)
   3  setup failure: cannot connect or listen, receiver busy, memory registration (memlock)
   4  stream aborted: peer aborted or lost, interrupted, input or output failed
   5  integrity failure: length, checksum or sequence mismatch
   6  authentication failure: wrong or missing key
   7  RDMA requested but not available`

// ExitCode maps an error to the exit code documented for its kind.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var u usageError
	if errors.As(err, &u) {
		return ExitUsage
	}
	switch conn.KindOf(err) {
	case conn.KindUsage:
		return ExitUsage
	case conn.KindSetup, conn.KindBusy:
		return ExitSetup
	case conn.KindAborted:
		return ExitAborted
	case conn.KindIntegrity:
		return ExitIntegrity
	case conn.KindAuth:
		return ExitAuth
	case conn.KindNoRDMA:
		return ExitNoRDMA
	}
	return ExitInternal
}

// usageError marks an error in the command line.
type usageError struct{ error }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// report prints err for the user on stderr, prefixed with the command name,
// and returns its exit code.
func report(stderr io.Writer, name string, err error) int {
	if err == nil {
		return ExitOK
	}
	code := ExitCode(err)
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	if h := hint(name, err); h != "" {
		fmt.Fprintf(stderr, "%s: hint: %s\n", name, h)
	}
	return code
}

// hint is what the user of command name can do about err, in the
// command's own flags (the library's errors say what happened, not which
// flag to use), or "".
func hint(name string, err error) string {
	if name != "rdmasend" && name != "rdmarecv" {
		return ""
	}
	text := err.Error()
	switch {
	case conn.KindOf(err) == conn.KindAuth:
		return "both sides need the same key: --key-file FILE (or RDMAPIPE_KEY) on each"
	case conn.KindOf(err) == conn.KindBusy && name == "rdmasend":
		return "rdmasend --wait DURATION retries while the receiver is busy"
	case strings.Contains(text, "does not relay") && name == "rdmasend":
		return "a receiver relays a broadcast only when started to: rdmarecv --relay-allow HOSTS (the hosts after it), or rdmarecv --relay with a key"
	case strings.Contains(text, "no word from the"):
		return "--timeout DURATION sets how long a silent peer is waited for"
	}
	return ""
}
