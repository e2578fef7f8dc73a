package chain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

func TestLineMarker(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	a := &lineMarker{mu: &mu, w: &out, name: "a"}
	b := &lineMarker{mu: &mu, w: &out, name: "b"}
	a.Write([]byte("one "))
	b.Write([]byte("two\nthree\nfo"))
	a.Write([]byte("line\n"))
	b.Write([]byte("ur"))
	a.flush()
	b.flush()
	want := "b: two\nb: three\na: one line\nb: four\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestFinishAll(t *testing.T) {
	failed := errors.New("it broke")
	cases := []struct {
		name   string
		errs   []error
		code   int
		report string
	}{
		{"all", []error{nil, nil, nil}, command.ExitOK, `"ok": true`},
		{"some", []error{nil, failed, nil}, command.ExitPartial, `"exit_code": 8`},
		{"none", []error{conn.Errorf(conn.KindSetup, "", "no ssh"), failed}, command.ExitSetup, `"exit_code": 3`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ms []*Member
			for i, err := range tc.errs {
				ms = append(ms, &Member{Target: remote.Target{Host: string(rune('a' + i))}, err: err})
			}
			var stderr bytes.Buffer
			path := t.TempDir() + "/stats.json"
			err := finishAll(ms, pipe.Stats{}, Config{Stderr: &stderr, Stats: path})
			if b, rerr := os.ReadFile(path); rerr != nil || !bytes.Contains(b, []byte(tc.report)) || bytes.Count(b, []byte(`"host"`)) != len(ms) {
				t.Errorf("--stats-json: %v\n%s\nwant %s and %d hosts", rerr, b, tc.report, len(ms))
			}
			if got := command.ExitCode(err); got != tc.code {
				t.Errorf("exit %d (%v), want %d", got, err, tc.code)
			}
			var p *command.Partial
			if errors.As(err, &p) && !slices.Equal(p.Failed, []string{"b"}) {
				t.Errorf("failed on %q, want b", p.Failed)
			}
			for i, e := range tc.errs {
				if e != nil && !strings.Contains(stderr.String(), "rdmacp: "+ms[i].Target.Host+": ") {
					t.Errorf("stderr does not name %s:\n%s", ms[i].Target.Host, stderr.String())
				}
			}
		})
	}
}

// TestLostMembers maps the engine's names of lost hosts to the members
// of a copy: each by its address (the first also by its connection's, the
// same IP and port written otherwise); a name of no member is refused,
// never taken for the first host.
func TestLostMembers(t *testing.T) {
	live := []*Member{{Addr: "10.0.0.1:4000"}, {Addr: "10.0.0.2:4000"}, {Addr: "[fd00::3]:4000"}}
	tests := []struct {
		name string
		lost []string
		want []int // indexes of the members lost
		err  string
	}{
		{"none", nil, nil, ""},
		{"the second", []string{"10.0.0.2:4000"}, []int{1}, ""},
		{"the first, by its connection's address", []string{"[::ffff:10.0.0.1]:4000"}, []int{0}, ""},
		{"the first and the last", []string{"10.0.0.1:4000", "[fd00::3]:4000"}, []int{0, 2}, ""},
		{"a host of no member", []string{"10.0.0.9:4000"}, nil, `names "10.0.0.9:4000", which is none of the hosts`},
		{"another port", []string{"10.0.0.2:4001"}, nil, "none of the hosts"},
		{"not an address", []string{"mem:receiver"}, nil, "none of the hosts"},
	}
	for _, tt := range tests {
		gone, err := lostMembers(live, tt.lost)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want one saying %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		var got []int
		for i, m := range live {
			if gone[m] {
				got = append(got, i)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: lost members %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestBrokenPair: once a chain failed before its stream, the pair named
// is the last host's (down the chain) that says it could not connect to
// its own next one; a host that says so of another address, or a failure
// that is no failure to connect, names none.
func TestBrokenPair(t *testing.T) {
	unreached := func(addr string) proto.Status {
		return proto.Status{Kind: "fail", N: command.ExitSetup, Msg: remote.CannotConnect(addr, errors.New("refused")).Error()}
	}
	gone := proto.Status{Kind: "fail", N: command.ExitAborted, Msg: "wait for the sender: the ssh session ended"}
	tests := []struct {
		name   string
		failed []proto.Status // each host's failure, h1 first
		says   string         // "": none
	}{
		{"none", []proto.Status{gone, gone, gone}, ""},
		{"the first", []proto.Status{unreached("10.0.0.2:1"), gone, gone}, "h1 cannot connect to h2 at 10.0.0.2:1"},
		{"the middle", []proto.Status{gone, unreached("10.0.0.3:1"), gone}, "h2 cannot connect to h3 at 10.0.0.3:1"},
		{"the middle, which the first then found gone", []proto.Status{unreached("10.0.0.2:1"), unreached("10.0.0.3:1"), gone}, "h2 cannot connect to h3 at 10.0.0.3:1"},
		{"an address not its next", []proto.Status{unreached("10.0.0.3:1"), gone, gone}, ""},
		{"the last, which has no next", []proto.Status{gone, gone, unreached("10.0.0.2:1")}, ""},
		{"not a setup failure", []proto.Status{{Kind: "fail", N: command.ExitAuth, Msg: unreached("10.0.0.2:1").Msg}, gone, gone}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var live []*Member
			for i, st := range tt.failed {
				live = append(live, &Member{Target: remote.Target{Host: fmt.Sprintf("h%d", i+1)}, Addr: fmt.Sprintf("10.0.0.%d:1", i+1), Remote: &remote.Remote{Failed: st}})
			}
			err := brokenPair(live)
			switch {
			case tt.says == "" && err != nil:
				t.Fatalf("got %v, want no pair", err)
			case tt.says != "" && (command.ExitCode(err) != command.ExitSetup || err == nil || !strings.HasPrefix(err.Error(), tt.says+": ")):
				t.Fatalf("got %v, want a setup failure starting %q", err, tt.says)
			}
		})
	}
}

// TestCatchUpAll: a host the stream gave up catches up from the first
// host in place that can help it, tried in turn; with none in place, or
// none that helps, it keeps its failure and says why.
func TestCatchUpAll(t *testing.T) {
	given := errors.New("given up")
	cases := []struct {
		name  string
		errs  []error  // of a, b, c; b is given up
		helps string   // the host that can help b
		tried []string // the hosts asked, in order
		says  string   // b's failure after the catch-up; "": none
	}{
		{"from the next in place", []error{nil, given, nil}, "c", []string{"c"}, ""},
		{"from another when the first fails", []error{nil, given, nil}, "a", []string{"c", "a"}, ""},
		{"none helps", []error{nil, given, nil}, "", []string{"c", "a"}, "given up; not caught up: from c: no; from a: no"},
		{"none in place", []error{given, given, given}, "a", nil, "given up; not caught up: no host has the copy in place"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ms []*Member
			for i, err := range tc.errs {
				ms = append(ms, &Member{Target: remote.Target{Host: string(rune('a' + i))}, err: err, given: i == 1})
			}
			var tried []string
			cfg := Config{CatchUp: func(_ context.Context, m, from *Member) error {
				if m != ms[1] {
					t.Errorf("caught up %s, which the stream did not give up", m.Target.Host)
				}
				tried = append(tried, from.Target.Host)
				if from.Target.Host == tc.helps {
					return nil
				}
				return errors.New("no")
			}}
			catchUpAll(context.Background(), ms, pipe.Stats{Bytes: 7}, cfg)
			if !slices.Equal(tried, tc.tried) {
				t.Errorf("asked %q, want %q", tried, tc.tried)
			}
			switch b := ms[1]; {
			case tc.says == "" && (b.err != nil || b.bytes != 7):
				t.Errorf("b: %v, %d bytes; want caught up with 7", b.err, b.bytes)
			case tc.says != "" && (b.err == nil || b.err.Error() != tc.says):
				t.Errorf("b: %v, want %q", b.err, tc.says)
			}
		})
	}
}
