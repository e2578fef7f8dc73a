package cp

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
// start with statusPrefix; other lines (say, from a chatty login script)
// are skipped. First an upload's receiving side says "port N" and a
// download's sending side "plan {CONTENTS AS JSON}" (or either "fail"),
// then "ok BYTES" or "fail CODE "quoted message"". Resuming, an upload's
// remote side says "have {OFFER AS JSON}" before its port, a download's
// "from N" after its plan (see resume.go). A download's sending side
// that sent down a chain of hosts (a request with Chain) names each host
// the stream gave up, "lost "ADDRESS"", before its "ok". An incremental
// copy's listing (see incr.go) is "entry TEXT" lines (see
// quick.Entry.AppendText), then
// "listed N": an upload's before its port, a download's after its plan.
// A download's sending side asked for its totals (Request.Progress) says
// "total FILES BYTES" of a tar-mode plan before it connects.
const statusPrefix = "RDMACP "

// maxStatusLine bounds one line from the remote side.
const maxStatusLine = 16 << 10

// status is one parsed status line.
type status struct {
	kind     string      // "port", "plan", "have", "from", "entry", "listed", "total", "lost", "ok" or "fail"
	n        int64       // the port, where the stream starts, the byte count, or the exit code
	files    int64       // the entries, for "total"
	msg      string      // the failure, for "fail"; the address, for "lost"
	contents Contents    // for "plan"
	offer    offer       // for "have"
	entry    quick.Entry // for "entry"
	valid    bool        // the line was a status line
}

func writePort(w io.Writer, port int) error {
	_, err := fmt.Fprintf(w, "%sport %d\n", statusPrefix, port)
	return err
}

func writePlan(w io.Writer, c Contents) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%splan %s\n", statusPrefix, b)
	return err
}

func writeHave(w io.Writer, o offer) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%shave %s\n", statusPrefix, b)
	return err
}

func writeFrom(w io.Writer, at int64) error {
	_, err := fmt.Fprintf(w, "%sfrom %d\n", statusPrefix, at)
	return err
}

// Bounds of a "total" line, which only feeds the progress line.
const (
	maxTotalFiles = 1 << 40
	maxTotalBytes = 1 << 62
)

// writeTotal reports the totals of an archive: its entries and their
// files' bytes (see countTree).
func writeTotal(w io.Writer, files, bytes int64) error {
	_, err := fmt.Fprintf(w, "%stotal %d %d\n", statusPrefix, files, bytes)
	return err
}

// maxLostAddr bounds the address of a "lost" line.
const maxLostAddr = 256

func writeLost(w io.Writer, addr string) error {
	_, err := fmt.Fprintf(w, "%slost %s\n", statusPrefix, strconv.Quote(addr))
	return err
}

func writeOK(w io.Writer, bytes int64) error {
	_, err := fmt.Fprintf(w, "%sok %d\n", statusPrefix, bytes)
	return err
}

func writeFail(w io.Writer, code int, msg string) error {
	_, err := fmt.Fprintf(w, "%sfail %d %s\n", statusPrefix, code, strconv.Quote(msg))
	return err
}

// parseStatus parses one line from the remote side. A line without the
// prefix is not a status line (valid false, no error); a line with it that
// does not parse is an error.
func parseStatus(line string) (status, error) {
	rest, ok := strings.CutPrefix(line, statusPrefix)
	if !ok {
		return status{}, nil
	}
	kind, args, _ := strings.Cut(rest, " ")
	switch kind {
	case "port":
		port, err := strconv.Atoi(args)
		if err != nil || port < 1 || port > 65535 {
			return status{}, malformed(line)
		}
		return status{kind: kind, n: int64(port), valid: true}, nil
	case "plan":
		var c Contents
		if err := strictJSON(args, &c); err != nil {
			return status{}, malformed(line)
		}
		if err := c.validate(); err != nil {
			return status{}, fmt.Errorf("the remote side's plan: %v", err)
		}
		return status{kind: kind, contents: c, valid: true}, nil
	case "have":
		var o offer
		if err := strictJSON(args, &o); err != nil {
			return status{}, malformed(line)
		}
		if err := o.validate(); err != nil {
			return status{}, fmt.Errorf("the remote side's offer: %v", err)
		}
		return status{kind: kind, offer: o, valid: true}, nil
	case "entry":
		e, err := quick.ParseEntry(args)
		if err != nil {
			return status{}, fmt.Errorf("the remote side's listing: %v", err)
		}
		return status{kind: kind, entry: e, valid: true}, nil
	case "from", "listed":
		n, err := strconv.ParseInt(args, 10, 64)
		if err != nil || n < 0 {
			return status{}, malformed(line)
		}
		return status{kind: kind, n: n, valid: true}, nil
	case "total":
		files, bytes, err := parseTotal(args)
		if err != nil {
			return status{}, malformed(line)
		}
		return status{kind: kind, files: files, n: bytes, valid: true}, nil
	case "lost":
		addr, err := strconv.Unquote(args)
		if err != nil || addr == "" || len(addr) > maxLostAddr {
			return status{}, malformed(line)
		}
		return status{kind: kind, msg: addr, valid: true}, nil
	case "ok":
		n, err := strconv.ParseInt(args, 10, 64)
		if err != nil || n < 0 {
			return status{}, malformed(line)
		}
		return status{kind: kind, n: n, valid: true}, nil
	case "fail":
		codeText, quoted, _ := strings.Cut(args, " ")
		code, err := strconv.Atoi(codeText)
		if err != nil || code < 1 || code > 255 {
			return status{}, malformed(line)
		}
		msg, err := strconv.Unquote(quoted)
		if err != nil {
			return status{}, malformed(line)
		}
		return status{kind: kind, n: int64(code), msg: msg, valid: true}, nil
	}
	return status{}, malformed(line)
}

// malformed is the error for a status line that parseStatus cannot take;
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
	return readJSONLine(bufio.NewReader(strings.NewReader(text+"\n")), v)
}
