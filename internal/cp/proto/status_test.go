package proto

import (
	"bufio"
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

func TestStatusRoundTrip(t *testing.T) {
	var b bytes.Buffer
	WritePort(&b, 41234)
	WriteHave(&b, Offer{Block: 4 << 20, Size: 5 << 20, Hashes: []string{strings.Repeat("0f", hashLen), strings.Repeat("a0", hashLen)}})
	WriteHave(&b, Offer{Name: "a/b", Block: MinBlock})
	WriteFrom(&b, 3<<20)
	WriteLost(&b, "[fe80::1%eth0]:4000")
	WriteTotal(&b, 2021, 5<<30)
	WriteOK(&b, 1<<40)
	WriteFail(&b, 3, "destination \"x\"\n\x1b[31m does not exist")
	want := []Status{
		{Kind: "port", N: 41234, Valid: true},
		{Kind: "have", Offer: Offer{Block: 4 << 20, Size: 5 << 20, Hashes: []string{strings.Repeat("0f", hashLen), strings.Repeat("a0", hashLen)}}, Valid: true},
		{Kind: "have", Offer: Offer{Name: "a/b", Block: MinBlock}, Valid: true},
		{Kind: "from", N: 3 << 20, Valid: true},
		{Kind: "lost", Msg: "[fe80::1%eth0]:4000", Valid: true},
		{Kind: "total", Files: 2021, N: 5 << 30, Valid: true},
		{Kind: "ok", N: 1 << 40, Valid: true},
		{Kind: "fail", N: 3, Msg: "destination \"x\"\n\x1b[31m does not exist", Valid: true},
	}
	for i, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		got, err := ParseStatus(line)
		if err != nil || !reflect.DeepEqual(got, want[i]) {
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
		{line: "RDMACP from -1", bad: true},
		{line: "RDMACP total 1", bad: true},
		{line: "RDMACP total -1 0", bad: true},
		{line: "RDMACP total 0 -1", bad: true},
		{line: "RDMACP total 1099511627777 0", bad: true},
		{line: "RDMACP total 0 4611686018427387905", bad: true},
		{line: "RDMACP total 1 2 3", bad: true},
		{line: "RDMACP total 0 0", valid: true},
		{line: "RDMACP lost 10.0.0.1:1", bad: true},
		{line: "RDMACP lost \"\"", bad: true},
		{line: "RDMACP lost \"" + strings.Repeat("1", maxLostAddr+1) + "\"", bad: true},
		{line: "RDMACP have {\"block\":1024,\"hashes\":[]}", bad: true},
		{line: "RDMACP have {\"block\":1048576,\"size\":1,\"hashes\":[\"00\"]}", bad: true},
		{line: "RDMACP have {\"block\":1048576,\"size\":1,\"hashes\":[]}", bad: true},
		{line: "RDMACP have {\"block\":1048576,\"size\":268435457,\"hashes\":" + hashes(MaxHashes+1) + "}", bad: true},
		{line: "RDMACP have {\"block\":1048576,\"size\":268435456,\"hashes\":" + hashes(MaxHashes) + "}", valid: true},
		{line: "RDMACP have {\"name\":\"../x\",\"block\":1048576}", bad: true},
		{line: "RDMACP have {\"name\":\"/x\",\"block\":1048576}", bad: true},
		{line: "RDMACP have {\"end\":true,\"block\":1048576}", bad: true},
		{line: "RDMACP have {\"block\":1048576,\"hashes\":[],\"x\":1}", bad: true},
	}
	for _, tc := range cases {
		got, err := ParseStatus(tc.line)
		if (err != nil) != tc.bad || got.Valid != tc.valid {
			t.Errorf("%q: got %+v, %v", tc.line, got, err)
		}
	}
}

// hashes is a JSON list of n block hashes.
func hashes(n int) string {
	h := make([]string, n)
	for i := range h {
		h[i] = `"` + strings.Repeat("ab", hashLen) + `"`
	}
	return "[" + strings.Join(h, ",") + "]"
}

func TestReadRequest(t *testing.T) {
	good := Request{Version: Version, Key: strings.Repeat("ab", keyLen), Dest: "/tmp", Contents: Contents{Mode: ModeFile, Name: "f", Perm: 0o644}, Transport: "auto", Timeout: time.Minute}
	cases := []struct {
		name   string
		change func(r *Request)
		raw    string // sent instead of the request when set
		ok     bool
	}{
		{name: "good", change: func(*Request) {}, ok: true},
		{name: "other version", change: func(r *Request) { r.Version = Version + 1 }},
		{name: "old version", change: func(r *Request) { r.Version = 1 }},
		{name: "download", change: download, ok: true},
		{name: "download with a destination", change: func(r *Request) { download(r); r.Dest = "/tmp" }},
		{name: "download with contents", change: func(r *Request) { download(r); r.Mode = ModeFile }},
		{name: "download with contents of files only", change: func(r *Request) { download(r); r.Files = true }},
		{name: "download nowhere", change: func(r *Request) { download(r); r.Connect = "" }},
		{name: "download to a name", change: func(r *Request) { download(r); r.Connect = "evil.example:80" }},
		{name: "download of an empty path", change: func(r *Request) { download(r); r.Send = []string{"a", ""} }},
		{name: "download of a NUL", change: func(r *Request) { download(r); r.Send = []string{"a\x00b"} }},
		{name: "download of too many", change: func(r *Request) { download(r); r.Send = make([]string, MaxSources+1) }},
		{name: "upload that connects", change: func(r *Request) { r.Connect = "10.0.0.1:1" }},
		{name: "between two hosts", change: later, ok: true},
		{name: "between two hosts, connecting now", change: func(r *Request) { later(r); r.Connect = "10.0.0.1:1" }},
		{name: "between two hosts, resuming", change: func(r *Request) { later(r); r.Resume = true }, ok: true},
		{name: "upload that connects later", change: func(r *Request) { r.ConnectLater = true }},
		{name: "between hosts, down a chain", change: func(r *Request) { later(r); r.Chain = true }, ok: true},
		{name: "download down a chain, connecting now", change: func(r *Request) { download(r); r.Chain = true }},
		{name: "between hosts, down a chain, resuming", change: func(r *Request) { later(r); r.Chain, r.Resume = true, true }},
		{name: "download that relays", change: func(r *Request) { later(r); r.Relay = true }},
		{name: "upload down a chain", change: func(r *Request) { r.Chain = true }},
		{name: "download with its totals", change: func(r *Request) { download(r); r.Progress = true }, ok: true},
		{name: "upload that asks for totals", change: func(r *Request) { r.Progress = true }},
		{name: "sparse", change: func(r *Request) { r.Mode = ModeSparse }, ok: true},
		{name: "relay", change: func(r *Request) { r.Relay = true }, ok: true},
		{name: "relay that resumes", change: func(r *Request) { r.Relay, r.Resume = true, true }},
		{name: "sparse without a name", change: func(r *Request) { r.Mode, r.Name = ModeSparse, "" }},
		{name: "short key", change: func(r *Request) { r.Key = "abcd" }},
		{name: "no destination", change: func(r *Request) { r.Dest = "" }},
		{name: "name with slash", change: func(r *Request) { r.Name = "../x" }},
		{name: "name dot dot", change: func(r *Request) { r.Name = ".." }},
		{name: "bad mode", change: func(r *Request) { r.Mode = "exec" }},
		{name: "bad transport", change: func(r *Request) { r.Transport = "udp" }},
		{name: "negative timeout", change: func(r *Request) { r.Timeout = -1 }},
		{name: "perm too big", change: func(r *Request) { r.Perm = 0o10000 }},
		{name: "unknown field", raw: `{"version":1,"evil":true}` + "\n"},
		{name: "endless line", raw: strings.Repeat("x", MaxRequestLine+10) + "\n"},
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
				if err := WriteRequest(&b, r); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ReadRequest(bufio.NewReaderSize(&b, 4096))
			if (err == nil) != tc.ok {
				t.Fatalf("got %v, want ok %v", err, tc.ok)
			}
			if err != nil && (conn.KindOf(err) != conn.KindSetup || !strings.HasPrefix(err.Error(), RequestOp+": ")) {
				t.Fatalf("got %v (%v), want a setup error that starts with %q", err, conn.KindOf(err), RequestOp)
			}
		})
	}
}

// download makes r a download's request.
func download(r *Request) {
	r.Dest, r.Contents = "", Contents{}
	r.Send, r.Recursive, r.Connect = []string{"a", "~/b c"}, true, "10.0.0.1:4791"
}

// later makes r the request to the sending side of a copy between two
// remote hosts.
func later(r *Request) {
	download(r)
	r.Connect, r.ConnectLater = "", true
}

func TestPlanLine(t *testing.T) {
	cases := []struct {
		name string
		c    Contents
		bad  bool
	}{
		{name: "file", c: Contents{Mode: ModeFile, Name: "a b\n", Perm: 0o4755, ATime: 1, MTime: -2}},
		{name: "tar", c: Contents{Mode: ModeTar, Single: true}},
		{name: "escape", c: Contents{Mode: ModeFile, Name: "../x"}, bad: true},
		{name: "no name", c: Contents{Mode: ModeFile}, bad: true},
		{name: "bad mode", c: Contents{Mode: "exec"}, bad: true},
		{name: "perm", c: Contents{Mode: ModeFile, Name: "x", Perm: 0o10000}, bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			WritePlan(&b, tc.c)
			got, err := ParseStatus(strings.TrimSuffix(b.String(), "\n"))
			if tc.bad {
				if err == nil {
					t.Fatalf("got %+v, want an error", got)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, Status{Kind: "plan", Contents: tc.c, Valid: true}) {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
	for _, line := range []string{`RDMACP plan {"mode":"tar","evil":1}`, `RDMACP plan {"mode":"tar"} {}`, `RDMACP plan`, `RDMACP plan [1]`} {
		if got, err := ParseStatus(line); err == nil {
			t.Errorf("%q: got %+v, want an error", line, got)
		}
	}
}

// TestRequestFilter checks that the remote side takes a download's filter
// rules only when they are few and short enough and each one parses, and
// an upload's never.
func TestRequestFilter(t *testing.T) {
	t.Parallel()
	many := make([]string, filter.MaxRules+1)
	for i := range many {
		many[i] = "- x"
	}
	cases := []struct {
		name     string
		upload   bool
		rules    []string
		ok       bool
		contains string
	}{
		{name: "rules", rules: []string{"- *.o", "+ */", "exclude /a/**", "!"}, ok: true},
		{name: "as many as allowed", rules: many[1:], ok: true},
		{name: "too many", rules: many, contains: "more than"},
		{name: "too long", rules: []string{"- " + strings.Repeat("a", filter.MaxLen+1)}, contains: "longer than"},
		{name: "not a rule", rules: []string{"*.o"}, contains: "not a rule"},
		{name: "bad pattern", rules: []string{"- a["}, contains: "without its ]"},
		{name: "a merge", rules: []string{"merge /etc/shadow"}, contains: "merge"},
		{name: "a modifier", rules: []string{"-/ /etc"}, contains: "modifiers"},
		{name: "upload with rules", upload: true, rules: []string{"- x"}, contains: "filter rules"},
	}
	for _, tc := range cases {
		r := Request{Version: Version, Key: strings.Repeat("ab", keyLen), Transport: "auto", Timeout: time.Minute, Filter: tc.rules}
		if tc.upload {
			r.Dest, r.Contents = "/tmp", Contents{Mode: ModeTar}
		} else {
			download(&r)
		}
		var b bytes.Buffer
		if err := WriteRequest(&b, r); err != nil {
			t.Fatal(err)
		}
		_, err := ReadRequest(bufio.NewReaderSize(&b, 4096))
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), tc.contains) {
			t.Errorf("%s: got %v, want ok %v or an error with %q", tc.name, err, tc.ok, tc.contains)
		}
	}
}
