// Package doctor checks whether this host can stream with rdmapipe and
// says what to fix: RDMA devices and ports, GIDs, locked memory, huge
// pages, and, against a running receiver, a real connect and handshake
// over RDMA and TCP (rdmasend --check, rdmarecv --check).
//
// Gather collects the facts (it touches the system and the network);
// Judge turns them into a Report (pure, so that every verdict is tested).
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Status is the verdict of one check.
type Status string

// The statuses, from good to bad. WARN does not stop a stream; FAIL does.
const (
	OK   Status = "OK"
	Warn Status = "WARN"
	Fail Status = "FAIL"
)

// Check is one line of the report.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"` // the command or step that fixes a WARN or FAIL
}

// Report is the outcome of a check run.
type Report struct {
	Command   string  `json:"command"`        // "rdmasend --check HOST:PORT" or "rdmarecv --check"
	Transport string  `json:"transport"`      // the --transport judged against
	OK        bool    `json:"ok"`             // a stream would work
	Path      string  `json:"path,omitempty"` // the transport a stream would take: "rdma" or "tcp"
	Verdict   string  `json:"verdict"`
	Checks    []Check `json:"checks"`
}

// add appends a check.
func (r *Report) add(name string, s Status, fix, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Name: name, Status: s, Detail: fmt.Sprintf(format, args...), Fix: fix})
}

// WriteText writes the report as the screen rdmasend --check prints.
func (r Report) WriteText(w io.Writer) error {
	width := 0
	for _, c := range r.Checks {
		width = max(width, len(c.Name))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (--transport %s)\n", r.Command, r.Transport)
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%-4s  %-*s  %s\n", c.Status, width, c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(&b, "%-4s  %-*s  fix: %s\n", "", width, "", c.Fix)
		}
	}
	verdict := "FAIL"
	if r.OK {
		verdict = "OK"
	}
	fmt.Fprintf(&b, "%s: %s\n", verdict, r.Verdict)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as one JSON document (--check --json).
func (r Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
