package wire

import (
	"bytes"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
)

// TestReport checks a report's decoding and checks against the chain of
// the receiver at place 2 whose chain ends at place 5: what AppendReport
// writes comes back, and a report that names another place first, a place
// twice, places out of order or past the chain, counts out of range, or
// whose size or count is off, is refused.
func TestReport(t *testing.T) {
	t.Parallel()
	mac := bytes.Repeat([]byte{7}, auth.MACLen)
	report := func(hosts ...HostLag) []byte { return append(AppendReport(9, hosts), mac...) }
	ok := []HostLag{{Place: 2, Behind: 5 << 20, Spilled: 1 << 20}, {Place: 3}, {Place: 5, Behind: 1}}
	tests := []struct {
		name      string
		msg       []byte
		parseErr  bool
		checkErrs bool
	}{
		{"three hosts", report(ok...), false, false},
		{"the receiver alone", report(HostLag{Place: 2}), false, false},
		{"another place first", report(HostLag{Place: 3}, HostLag{Place: 4}), false, true},
		{"a place before the receiver", report(HostLag{Place: 2}, HostLag{Place: 1}), false, true},
		{"a duplicate place", report(HostLag{Place: 2}, HostLag{Place: 3}, HostLag{Place: 3}), false, true},
		{"past the chain", report(HostLag{Place: 2}, HostLag{Place: 6}), false, true},
		{"negative", report(HostLag{Place: 2, Behind: -1}), false, true},
		{"huge lag", report(HostLag{Place: 2, Spilled: MaxReportLag + 1}), false, true},
		{"no hosts", report(), true, false},
		{"a huge count", func() []byte { b := report(ok...); b[5] = 200; return b }(), true, false},
		{"a count above the bytes", func() []byte { b := report(ok...); b[5] = 4; return b }(), true, false},
		{"a byte too many", append(report(ok...), 0), true, false},
		{"short", []byte{MsgReport, 9, 0, 0, 0}, true, false},
		{"another type", append([]byte{MsgLost}, report(ok...)[1:]...), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ask, hosts, body, gotMAC, err := ParseReport(tt.msg, auth.MACLen)
			if (err != nil) != tt.parseErr {
				t.Fatalf("ParseReport: %v, want an error: %v", err, tt.parseErr)
			}
			if err != nil {
				return
			}
			if ask != 9 || !bytes.Equal(gotMAC, mac) || !bytes.Equal(body, tt.msg[:len(tt.msg)-auth.MACLen]) {
				t.Errorf("ParseReport = ask %d, mac %x, body of %d bytes: not what was sent", ask, gotMAC, len(body))
			}
			if err := CheckReport(hosts, 2, 5); (err != nil) != tt.checkErrs {
				t.Errorf("CheckReport(%v): %v, want an error: %v", hosts, err, tt.checkErrs)
			}
		})
	}
	if got := report(ok...); len(got) > conn.MaxControl {
		t.Errorf("a report of %d bytes does not fit a control message", len(got))
	}
	many := make([]HostLag, MaxReportHosts+5)
	for i := range many {
		many[i].Place = uint32(2 + i)
	}
	b := append(AppendReport(1, many), mac...)
	if _, hosts, _, _, err := ParseReport(b, auth.MACLen); err != nil || len(hosts) != MaxReportHosts || len(b) > conn.MaxControl {
		t.Errorf("a report of too many hosts: %d hosts in %d bytes (%v), want %d in at most %d", len(hosts), len(b), err, MaxReportHosts, conn.MaxControl)
	}
}

// FuzzReport feeds arbitrary bytes to the report's decoder and checks:
// none may panic, and what they take holds at most MaxReportHosts hosts
// with rising places within the chain.
func FuzzReport(f *testing.F) {
	f.Add(append(AppendReport(1, []HostLag{{Place: 2, Behind: 3}, {Place: 4}}), make([]byte, auth.MACLen)...))
	f.Add([]byte{MsgReport, 0, 0, 0, 0, 255})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, hosts, body, mac, err := ParseReport(b, auth.MACLen)
		if err != nil {
			return
		}
		if len(hosts) > MaxReportHosts || len(body)+len(mac) != len(b) {
			t.Fatalf("ParseReport took %d hosts from %d bytes", len(hosts), len(b))
		}
		if CheckReport(hosts, 2, 10) != nil {
			return
		}
		for i, h := range hosts {
			if h.Place < 2 || h.Place > 10 || i > 0 && h.Place <= hosts[i-1].Place || h.Behind < 0 || h.Spilled < 0 {
				t.Fatalf("CheckReport passed %v", hosts)
			}
		}
	})
}
