package cp

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestStatusRoundTrip(t *testing.T) {
	var b bytes.Buffer
	writePort(&b, 41234)
	writeOK(&b, 1<<40)
	writeFail(&b, 3, "destination \"x\"\n\x1b[31m does not exist")
	want := []status{
		{kind: "port", n: 41234, valid: true},
		{kind: "ok", n: 1 << 40, valid: true},
		{kind: "fail", n: 3, msg: "destination \"x\"\n\x1b[31m does not exist", valid: true},
	}
	for i, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		got, err := parseStatus(line)
		if err != nil || got != want[i] {
			t.Errorf("line %q: got %+v, %v; want %+v", line, got, err, want[i])
		}
	}
}

func TestParseStatusHostile(t *testing.T) {
	cases := []struct {
		line  string
		valid bool
		bad   bool
	}{
		{line: "Welcome to node2!", valid: false},
		{line: "RDMACP port 0", bad: true},
		{line: "RDMACP port 70000", bad: true},
		{line: "RDMACP port x", bad: true},
		{line: "RDMACP ok -1", bad: true},
		{line: "RDMACP fail 0 \"x\"", bad: true},
		{line: "RDMACP fail 3 unquoted", bad: true},
		{line: "RDMACP launch missiles", bad: true},
		{line: "RDMACP fail 4 \"ok\"", valid: true},
	}
	for _, tc := range cases {
		got, err := parseStatus(tc.line)
		if (err != nil) != tc.bad || got.valid != tc.valid {
			t.Errorf("%q: got %+v, %v", tc.line, got, err)
		}
	}
}

func TestReadRequest(t *testing.T) {
	good := Request{Version: protocolVersion, Key: strings.Repeat("ab", keyLen), Dest: "/tmp", Mode: modeFile, Name: "f", Perm: 0o644, Transport: "auto", Timeout: time.Minute}
	cases := []struct {
		name   string
		change func(r *Request)
		raw    string // sent instead of the request when set
		ok     bool
	}{
		{name: "good", change: func(*Request) {}, ok: true},
		{name: "other version", change: func(r *Request) { r.Version = protocolVersion + 1 }},
		{name: "sparse", change: func(r *Request) { r.Mode = modeSparse }, ok: true},
		{name: "sparse without a name", change: func(r *Request) { r.Mode, r.Name = modeSparse, "" }},
		{name: "short key", change: func(r *Request) { r.Key = "abcd" }},
		{name: "no destination", change: func(r *Request) { r.Dest = "" }},
		{name: "name with slash", change: func(r *Request) { r.Name = "../x" }},
		{name: "name dot dot", change: func(r *Request) { r.Name = ".." }},
		{name: "bad mode", change: func(r *Request) { r.Mode = "exec" }},
		{name: "bad transport", change: func(r *Request) { r.Transport = "udp" }},
		{name: "negative timeout", change: func(r *Request) { r.Timeout = -1 }},
		{name: "perm too big", change: func(r *Request) { r.Perm = 0o10000 }},
		{name: "unknown field", raw: `{"version":1,"evil":true}` + "\n"},
		{name: "endless line", raw: strings.Repeat("x", maxRequestLine+10) + "\n"},
		{name: "no newline", raw: `{"version":1}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if tc.raw != "" {
				b.WriteString(tc.raw)
			} else {
				r := good
				tc.change(&r)
				if err := writeRequest(&b, r); err != nil {
					t.Fatal(err)
				}
			}
			_, err := readRequest(bufio.NewReaderSize(&b, 4096))
			if (err == nil) != tc.ok {
				t.Fatalf("got %v, want ok %v", err, tc.ok)
			}
		})
	}
}
