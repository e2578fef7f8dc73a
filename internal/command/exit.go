// Package command holds what the rdmasend, rdmarecv and rdmacp commands
// share as programs: running a command line (Run), exit codes, usage
// errors, --version, the man page and completion scripts, and the one
// signal handler. The library (package pipe) says what happened; a command
// adds the hint in its own flags.
package command

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
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
	ExitPartial   = 8 // a copy to several hosts is complete on some and failed on others
	ExitUnasked   = 9 // a download's remote side would send what was not asked for: refused
)

// Partial is the error of a copy to several hosts that is complete on
// some of them and failed on the others: exit code 8, so that a script can
// tell it from a copy that failed everywhere and retry only the Failed
// hosts.
type Partial struct {
	Failed []string // the hosts the copy failed on, as named
	Hosts  int      // how many hosts the copy was for
}

func (e *Partial) Error() string {
	return fmt.Sprintf("%d of %d hosts failed (%s); every other one has it whole", len(e.Failed), e.Hosts, strings.Join(e.Failed, ", "))
}

// Unasked is the error of a download whose remote side said it would send,
// or sent, what was not asked for (another name, an archive instead of a
// file, an entry outside the names asked for): refused before it is
// written, exit code 9. Claim is the remote side's, quoted in the message.
type Unasked struct {
	Host  string // the remote host, as named
	Claim string // what the remote side said or sent
	Why   string // why it was not asked for
}

func (e *Unasked) Error() string {
	return fmt.Sprintf("the remote side on %s sent what was not asked for: %q: %s; refused, nothing of it written", e.Host, e.Claim, e.Why)
}

// ExitCode maps an error to the exit code documented for its kind.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if p := (*Partial)(nil); errors.As(err, &p) {
		return ExitPartial
	}
	if u := (*Unasked)(nil); errors.As(err, &u) {
		return ExitUnasked
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

// Usagef returns an error in the command line: an error of kind
// conn.KindUsage, exit code 2.
func Usagef(format string, args ...any) error {
	return conn.Errorf(conn.KindUsage, "", format, args...)
}

// report prints err for the user on stderr, prefixed with the command name,
// and the hint for it, if any, and returns its exit code.
func report(stderr io.Writer, name string, err error, hint Hint) int {
	if err == nil {
		return ExitOK
	}
	code := ExitCode(err)
	fmt.Fprintf(stderr, "%s: %s\n", name, Message(err))
	if hint == nil {
		return code
	}
	if h := hint(name, err); h != "" {
		fmt.Fprintf(stderr, "%s: hint: %s\n", name, h)
	}
	return code
}

// Message is err's text in the user's words: the system calls that the
// errors of files and sockets name (lstat, open, connect, ...) are left
// out, so that "destination lstat /root/d1: permission denied" reads
// "destination /root/d1: permission denied".
func Message(err error) string {
	msg := err.Error()
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch e := e.(type) {
		case *fs.PathError:
			msg = strings.Replace(msg, e.Op+" "+e.Path+": ", e.Path+": ", 1)
		case *os.SyscallError:
			msg = strings.Replace(msg, e.Syscall+": ", "", 1)
		}
	}
	return msg
}
