package cp

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/plan"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
)

// TestRelayedPlan: the sending host's plan reaches the receiving host
// only as a download's local side would take it, with the names checked
// and nothing of what only that side reads; a name only the sending host
// knows is refused, as nothing can tell whether DST is new for it.
func TestRelayedPlan(t *testing.T) {
	cases := []struct {
		name  string
		a     plan.Asked
		c     proto.Contents
		claim string // "": taken
		files bool   // the receiving side takes only files
	}{
		{"file", plan.Asked{Srcs: []string{"d/f"}}, proto.Contents{Mode: proto.ModeFile, Name: "f", Perm: 0o640, Size: 9}, "", false},
		{"file under another name", plan.Asked{Srcs: []string{"d/f"}}, proto.Contents{Mode: proto.ModeFile, Name: ".bashrc"}, ".bashrc", false},
		{"archive of several", plan.Asked{Srcs: []string{"a", "*.txt"}, Recursive: true}, proto.Contents{Mode: proto.ModeTar, Names: []string{"a", "x.txt"}, Counts: []int{1, 1}}, "", false},
		{"archive of several without -r", plan.Asked{Srcs: []string{"a", "*.txt"}}, proto.Contents{Mode: proto.ModeTar, Names: []string{"a", "x.txt"}, Counts: []int{1, 1}}, "", true},
		{"one left out", plan.Asked{Srcs: []string{"a", "b"}}, proto.Contents{Mode: proto.ModeTar, Names: []string{"b"}, Counts: []int{0, 1}, Left: 1}, "", true},
		{"archive with one more", plan.Asked{Srcs: []string{"a"}, Recursive: true}, proto.Contents{Mode: proto.ModeTar, Single: true, Names: []string{"a", ".ssh"}}, "an archive of a, .ssh", false},
		{"dot, whose name only that host knows", plan.Asked{Srcs: []string{"."}, Recursive: true}, proto.Contents{Mode: proto.ModeTar, Single: true, Names: []string{"alice"}}, "alice", false},
		{"a pattern's one match as a file", plan.Asked{Srcs: []string{"src/g*"}}, proto.Contents{Mode: proto.ModeFile, Name: "g1", Perm: 0o644, Size: 2}, "", false},
		{"a pattern's literal as a file", plan.Asked{Srcs: []string{"src/g[1]"}}, proto.Contents{Mode: proto.ModeFile, Name: "g[1]", Size: 2}, "", false},
		{"a pattern's literal, and another name", plan.Asked{Srcs: []string{"src/g[1]"}}, proto.Contents{Mode: proto.ModeTar, Names: []string{"g[1]", ".ssh"}, Counts: []int{2}}, ".ssh", false},
		{"another name for a pattern's literal", plan.Asked{Srcs: []string{"src/g[1]"}}, proto.Contents{Mode: proto.ModeFile, Name: ".bashrc"}, ".bashrc", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := relayedPlan(tc.a, tc.c)
			var u *proto.Unasked
			switch {
			case tc.claim == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.claim != "" && (!errors.As(err, &u) || u.Claim != tc.claim):
				t.Fatalf("got %v, want the refusal of %q", err, tc.claim)
			case tc.claim != "":
				return
			}
			if c.Counts != nil || c.Left != 0 || c.Mode != tc.c.Mode || c.Name != tc.c.Name || c.Perm != tc.c.Perm || !slices.Equal(c.Names, tc.c.Names) || c.Files != tc.files {
				t.Fatalf("got %+v from %+v", c, tc.c)
			}
			req := proto.Request{Version: proto.Version, Key: hex.EncodeToString(proto.NewKey()), Dest: "d", Contents: c, Transport: "auto"}
			var b bytes.Buffer
			proto.WriteRequest(&b, req)
			if _, err := proto.ReadRequest(bufio.NewReader(&b)); err != nil {
				t.Fatalf("the receiving side would refuse %+v: %v", c, err)
			}
		})
	}
}

// TestBetweenOutcome: a copy between two hosts succeeds only when both
// say they moved the same bytes; when both failed, the receiving side's
// failure gives the exit code, and both are said. A receiving side that
// refused an entry of the sending side's archive as not asked for makes
// it exit 9, quoting the entry as the sending side's claim.
func TestBetweenOutcome(t *testing.T) {
	ok := func(n int64) proto.Status { return proto.Status{Kind: "ok", N: n, Valid: true} }
	fail := func(code int64, msg string) proto.Status {
		return proto.Status{Kind: "fail", N: code, Msg: msg, Valid: true}
	}
	cases := []struct {
		name       string
		sent, got  proto.Status
		code       int
		says, also string
	}{
		{"both ok", ok(9), ok(9), command.ExitOK, "", ""},
		{"fewer written", ok(9), ok(8), command.ExitIntegrity, "sent by h0", ""},
		{"the sender says no result", proto.Status{Kind: "from", N: 9, Valid: true}, ok(9), command.ExitIntegrity, "reports from", ""},
		{"the receiver failed", ok(9), fail(3, "DST not writable"), command.ExitSetup, "DST not writable", ""},
		{"the sender failed", fail(4, "input failed"), ok(0), command.ExitAborted, "input failed", ""},
		{"both failed", fail(4, "the peer aborted"), fail(6, "authentication failed"), command.ExitAuth, "authentication failed", "the peer aborted"},
		{"the receiver refused an entry", ok(9), fail(9, (&proto.Unasked{Claim: "bin/planted", Why: "a directory, or in one, without -r"}).Error()), command.ExitUnasked,
			`the remote side on h0 sent what was not asked for: "bin/planted": a directory, or in one, without -r (refused on h1)`, ""},
		{"the receiver says 9 of nothing", ok(9), fail(9, "not asked for"), command.ExitInternal, `remote side on h1: "not asked for"`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := betweenOutcome(tc.sent, tc.got, "h0", "h1")
			if got := command.ExitCode(err); got != tc.code || err != nil && (!strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), tc.also)) {
				t.Fatalf("exit %d (%v), want %d saying %q and %q", got, err, tc.code, tc.says, tc.also)
			}
		})
	}
}
