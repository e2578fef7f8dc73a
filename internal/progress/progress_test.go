package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestMeter draws progress lines into a buffer, on a terminal (redrawn in
// place) and off one (a line each): what the first, the throttled and
// the final drawings show, and that the last never claims bytes that did
// not move. Every is an hour, so that only the first Set and End draw.
func TestMeter(t *testing.T) {
	t.Parallel()
	tail := func() string { return "(xfr#1, to-chk=0/2)" }
	tests := []struct {
		name  string
		c     Config
		sets  []int64
		end   int64 // -1: Stop instead
		lines int   // lines written
		last  []string
		not   []string // nowhere in what was written
	}{
		{"known size, whole", Config{Size: 4 << 20, Label: "sending", Lines: true}, []int64{1 << 20, 2 << 20}, 4 << 20, 2,
			[]string{"sending 100% |████████████████████| (4.0/4.0 MiB, ", "B/s) [0s]"}, []string{"\r", "2.0/4.0"}},
		{"known size, short", Config{Size: 3 << 30, Label: "sending", Lines: true}, nil, 0, 1,
			[]string{"sending   0% |                    | ( 0 B/3.0 GiB)"}, []string{"100%", "3.0/3.0"}},
		{"unknown size", Config{Size: -1, Label: "receiving", Lines: true}, []int64{5}, 3 << 20, 2,
			[]string{"receiving (3.0 MiB, ", "/s) [0s]"}, []string{"%"}},
		{"on a terminal", Config{Size: -1, Label: "receiving"}, []int64{5, 6, 7}, 3 << 20, 1,
			[]string{"\r", "receiving (3.0 MiB, ", "/s) [0s]"}, []string{"( 5 B", "( 6 B", "( 7 B"}},
		{"stopped where the last Set left it", Config{Size: 1 << 20, Lines: true}, []int64{5, 4096}, -1, 2,
			[]string{"   0% |                    | (4.0 KiB/1.0 MiB, "}, []string{"100%"}},
		{"a tail", Config{Size: 2048, Tail: tail, Lines: true}, []int64{1024}, 2048, 2,
			[]string{"100% |", "(2.0/2.0 KiB, ", "(xfr#1, to-chk=0/2)"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			tt.c.W, tt.c.Every = &out, time.Hour
			m := New(tt.c)
			for _, n := range tt.sets {
				m.Set(n)
			}
			if tt.end < 0 {
				m.Stop()
			} else {
				m.End(tt.end)
			}
			got := out.String()
			if n := strings.Count(got, "\n"); n != tt.lines || !strings.HasSuffix(got, "\n") {
				t.Errorf("%d lines, want %d, the last ended: %q", n, tt.lines, got)
			}
			lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
			last := lines[len(lines)-1]
			if i := strings.LastIndex(last, "\r"); i >= 0 && !tt.c.Lines {
				last = last[i:]
			}
			for _, s := range tt.last {
				if !strings.Contains(last, s) {
					t.Errorf("the last line %q lacks %q", last, s)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(got, s) {
					t.Errorf("%q holds %q", got, s)
				}
			}
		})
	}
}

// TestMeterNothingDrawn: a meter stopped before any Set draws nothing.
func TestMeterNothingDrawn(t *testing.T) {
	var out bytes.Buffer
	New(Config{W: &out, Size: 10, Every: time.Hour}).Stop()
	if out.Len() != 0 {
		t.Errorf("drew %q", out.String())
	}
}
