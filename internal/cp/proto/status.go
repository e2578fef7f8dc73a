package proto

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/cp/quick"
)

// The remote side reports on its stdout, the ssh channel, in lines that
// start with StatusPrefix; other lines (say, from a chatty login script)
// are skipped. First an upload's receiving side says "port N" and a
// download's sending side "plan {CONTENTS AS JSON}" (or either "fail"),
// then "ok BYTES" or "fail CODE "quoted message"". Resuming, an upload's
// remote side says "have {OFFER AS JSON}" before its port, a download's
// "from N" after its plan (see resume.go). A download's sending side
// that sent down a chain of hosts (a request with Chain) names each host
// the stream gave up, "lost "ADDRESS"", before its "ok". An incremental
// copy's listing (see internal/cp/incr.go) is "entry TEXT" lines (see
// quick.Entry.AppendText), then
// "listed N": an upload's before its port, a download's after its plan.
// A download's sending side asked for its totals (Request.Progress) says
// "total FILES BYTES" of a tar-mode plan before it connects.
const StatusPrefix = "RDMACP "

// MaxStatusLine bounds one line from the remote side.
const MaxStatusLine = 16 << 10

// Status is one parsed status line.
type Status struct {
	Kind     string      // "port", "plan", "have", "from", "entry", "listed", "total", "lost", "ok" or "fail"
	N        int64       // the port, where the stream starts, the byte count, or the exit code
	Files    int64       // the entries, for "total"
	Msg      string      // the failure, for "fail"; the address, for "lost"
	Contents Contents    // for "plan"
	Offer    Offer       // for "have"
	Entry    quick.Entry // for "entry"
	Valid    bool        // the line was a status line
}

// WritePort reports the port an upload's remote side listens on.
func WritePort(w io.Writer, port int) error {
	_, err := fmt.Fprintf(w, "%sport %d\n", StatusPrefix, port)
	return err
}

// WritePlan reports what a download's sending side will stream.
func WritePlan(w io.Writer, c Contents) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%splan %s\n", StatusPrefix, b)
	return err
}

// WriteHave offers what the receiving side has of a file, for a resume.
func WriteHave(w io.Writer, o Offer) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%shave %s\n", StatusPrefix, b)
	return err
}

// WriteFrom reports where a resumed file's stream starts.
func WriteFrom(w io.Writer, at int64) error {
	_, err := fmt.Fprintf(w, "%sfrom %d\n", StatusPrefix, at)
	return err
}

// Bounds of a "total" line, which only feeds the progress line.
const (
	maxTotalFiles = 1 << 40
	maxTotalBytes = 1 << 62
)

// WriteTotal reports the totals of an archive: its entries and their
// files' bytes (see tree.CountTree).
func WriteTotal(w io.Writer, files, bytes int64) error {
	_, err := fmt.Fprintf(w, "%stotal %d %d\n", StatusPrefix, files, bytes)
	return err
}

// maxLostAddr bounds the address of a "lost" line.
const maxLostAddr = 256

// WriteLost names a host that a stream down a chain gave up.
func WriteLost(w io.Writer, addr string) error {
	_, err := fmt.Fprintf(w, "%slost %s\n", StatusPrefix, strconv.Quote(addr))
	return err
}

// WriteOK reports that the copy is in place; bytes is the stream's byte count.
func WriteOK(w io.Writer, bytes int64) error {
	_, err := fmt.Fprintf(w, "%sok %d\n", StatusPrefix, bytes)
	return err
}

// WriteFail reports a failure, with the exit code it stands for.
func WriteFail(w io.Writer, code int, msg string) error {
	_, err := fmt.Fprintf(w, "%sfail %d %s\n", StatusPrefix, code, strconv.Quote(msg))
	return err
}

// ParseStatus parses one line from the remote side. A line without the
// prefix is not a status line (valid false, no error); a line with it that
// does not parse is an error.
func ParseStatus(line string) (Status, error) {
	rest, ok := strings.CutPrefix(line, StatusPrefix)
	if !ok {
		return Status{}, nil
	}
	kind, args, _ := strings.Cut(rest, " ")
	switch kind {
	case "port":
		port, err := strconv.Atoi(args)
		if err != nil || port < 1 || port > 65535 {
			return Status{}, malformed(line)
		}
		return Status{Kind: kind, N: int64(port), Valid: true}, nil
	case "plan":
		var c Contents
		if err := strictJSON(args, &c); err != nil {
			return Status{}, malformed(line)
		}
		if err := c.validate(); err != nil {
			return Status{}, fmt.Errorf("the remote side's plan: %v", err)
		}
		return Status{Kind: kind, Contents: c, Valid: true}, nil
	case "have":
		var o Offer
		if err := strictJSON(args, &o); err != nil {
			return Status{}, malformed(line)
		}
		if err := o.Validate(); err != nil {
			return Status{}, fmt.Errorf("the remote side's offer: %v", err)
		}
		return Status{Kind: kind, Offer: o, Valid: true}, nil
	case "entry":
		e, err := quick.ParseEntry(args)
		if err != nil {
			return Status{}, fmt.Errorf("the remote side's listing: %v", err)
		}
		return Status{Kind: kind, Entry: e, Valid: true}, nil
	case "from", "listed":
		n, err := strconv.ParseInt(args, 10, 64)
		if err != nil || n < 0 {
			return Status{}, malformed(line)
		}
		return Status{Kind: kind, N: n, Valid: true}, nil
	case "total":
		files, bytes, err := parseTotal(args)
		if err != nil {
			return Status{}, malformed(line)
		}
		return Status{Kind: kind, Files: files, N: bytes, Valid: true}, nil
	case "lost":
		addr, err := strconv.Unquote(args)
		if err != nil || addr == "" || len(addr) > maxLostAddr {
			return Status{}, malformed(line)
		}
		return Status{Kind: kind, Msg: addr, Valid: true}, nil
	case "ok":
		n, err := strconv.ParseInt(args, 10, 64)
		if err != nil || n < 0 {
			return Status{}, malformed(line)
		}
		return Status{Kind: kind, N: n, Valid: true}, nil
	case "fail":
		codeText, quoted, _ := strings.Cut(args, " ")
		code, err := strconv.Atoi(codeText)
		if err != nil || code < 1 || code > 255 {
			return Status{}, malformed(line)
		}
		msg, err := strconv.Unquote(quoted)
		if err != nil {
			return Status{}, malformed(line)
		}
		return Status{Kind: kind, N: int64(code), Msg: msg, Valid: true}, nil
	}
	return Status{}, malformed(line)
}

// malformed is the error for a status line that ParseStatus cannot take;
// it is made only for such a line, since a listing has one per entry.
func malformed(line string) error {
	return fmt.Errorf("malformed status line from the remote side: %.200q", line)
}

// parseTotal parses the FILES BYTES of a "total" line, each bounded.
func parseTotal(args string) (files, bytes int64, err error) {
	f, b, _ := strings.Cut(args, " ")
	if files, err = strconv.ParseInt(f, 10, 64); err != nil || files < 0 || files > maxTotalFiles {
		return 0, 0, errors.New("bad file count")
	}
	if bytes, err = strconv.ParseInt(b, 10, 64); err != nil || bytes < 0 || bytes > maxTotalBytes {
		return 0, 0, errors.New("bad byte count")
	}
	return files, bytes, nil
}

// strictJSON decodes text, one JSON value, into v, refusing fields v has
// not.
func strictJSON(text string, v any) error {
	return ReadJSONLine(bufio.NewReader(strings.NewReader(text+"\n")), v)
}
