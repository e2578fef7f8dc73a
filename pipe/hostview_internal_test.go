package pipe

import (
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// TestHostReportHostile has a receiver at place 2 of a chain of four
// that holds the key send reports that lie: another place as its own, a
// place twice, places past the chain, a huge count, garbage, another
// ask's answer, a MAC under another key. Each is dropped without failing
// the stream, its control credit returned, the view emptied and counted;
// an honest report then shows again, and a report nobody asked for fails
// the stream as any message that breaks the protocol does.
func TestHostReportHostile(t *testing.T) {
	t.Parallel()
	key := auth.StreamKey([]byte("k"), []byte("transcript"))
	g := &Gauges{}
	s := newSender(nil, streamConfig{view: newChainView(g)}, timeouts{}, "receiver")
	s.seal = seal.NewKeyed(key, false)
	s.pos = position{place: 2, down: []string{"c", "d"}, whole: true}
	sealed := func(ask uint32, hosts ...wire.HostLag) []byte {
		b := wire.AppendReport(ask, hosts)
		return append(b, s.seal.Report(b)...)
	}
	other := seal.NewKeyed(auth.StreamKey([]byte("other"), []byte("transcript")), false)
	honest := []wire.HostLag{{Place: 2}, {Place: 3, Behind: 7 << 20, Spilled: 1 << 20}, {Place: 4}}
	tests := []struct {
		name string
		msg  func(ask uint32) []byte
	}{
		{"another place as its own", func(a uint32) []byte { return sealed(a, wire.HostLag{Place: 3, Behind: 1 << 30}) }},
		{"a place twice", func(a uint32) []byte {
			return sealed(a, wire.HostLag{Place: 2}, wire.HostLag{Place: 3}, wire.HostLag{Place: 3})
		}},
		{"past the chain", func(a uint32) []byte { return sealed(a, wire.HostLag{Place: 2}, wire.HostLag{Place: 5}) }},
		{"a huge count", func(a uint32) []byte { b := sealed(a, honest...); b[5] = 255; return b }},
		{"garbage", func(uint32) []byte { return []byte{wire.MsgReport, 0xff, 0x13, 0x37} }},
		{"an old ask's answer", func(a uint32) []byte { return sealed(a-1, honest...) }},
		{"another key's MAC", func(a uint32) []byte {
			b := wire.AppendReport(a, honest)
			return append(b, other.Report(b)...)
		}},
	}
	for i, tt := range tests {
		ask(t, s)
		if err := s.takeReport(sealed(s.asked.Load(), honest...)); err != nil || len(g.Hosts()) != 3 {
			t.Fatalf("an honest report: %v, view %v", err, g.Hosts())
		}
		ask(t, s)
		if err := s.takeReport(tt.msg(s.asked.Load())); err != nil {
			t.Errorf("%s: failed the stream: %v", tt.name, err)
		}
		if len(s.ctrl) != 1 {
			t.Errorf("%s: the ask's control credit was not returned", tt.name)
		}
		if h := g.Hosts(); len(h) != 0 || g.RefusedReports() != int64(i+1) {
			t.Errorf("%s: the view is %v with %d refused, want empty with %d", tt.name, h, g.RefusedReports(), i+1)
		}
	}
	if err := s.takeReport(sealed(s.asked.Load(), honest...)); err == nil {
		t.Errorf("a report nobody asked for was taken")
	}
}

// ask takes the control credit for an ask, as askReports does.
func ask(t *testing.T, s *sender) {
	t.Helper()
	select {
	case <-s.ctrl:
	default:
		t.Fatal("no control credit to ask with")
	}
	s.asked.Add(1)
	s.asking.Store(true)
}
