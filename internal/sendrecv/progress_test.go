package sendrecv

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgress drives progress lines on a fake clock: what each shows,
// that it redraws at most every progressEvery, and that the last line
// never claims bytes that did not move.
func TestProgress(t *testing.T) {
	type step struct {
		after time.Duration // clock advance before the call
		set   int64         // bytes for set; -1: end(endAt) instead
	}
	tests := []struct {
		name    string
		size    int64
		desc    string
		steps   []step
		endAt   int64
		draws   int      // lines drawn (carriage returns)
		last    []string // substrings of the last line
		notLast []string
	}{
		{
			name:  "known size, half way",
			size:  4 << 20,
			desc:  "sending",
			steps: []step{{time.Second, 2 << 20}},
			draws: 1,
			last:  []string{"sending (average 2.1 MB/s)", " 50% [##########          ] 2.0 MiB / 4.0 MiB", ", 2.1 MB/s", ", 1s left"},
		},
		{
			name:    "known size, complete",
			size:    4 << 20,
			desc:    "sending",
			steps:   []step{{time.Second, 2 << 20}, {time.Second, -1}},
			endAt:   4 << 20,
			draws:   2,
			last:    []string{"100% [####################] 4.0 MiB / 4.0 MiB", "\n"},
			notLast: []string{"left"},
		},
		{
			name:    "stream shorter than --size",
			size:    3 << 30,
			desc:    "sending",
			steps:   []step{{time.Second, -1}},
			endAt:   0,
			draws:   1,
			last:    []string{"  0% [                    ] 0 B / 3.0 GiB", "\n"},
			notLast: []string{"100%", "3.0 GiB / 3.0 GiB"},
		},
		{
			name:    "unknown size",
			size:    -1,
			desc:    "receiving",
			steps:   []step{{2 * time.Second, 2 << 20}, {time.Second, -1}},
			endAt:   3 << 20,
			draws:   2,
			last:    []string{"receiving (average 1.0 MB/s) 3.0 MiB, ", "\n"},
			notLast: []string{"%", "left"},
		},
		{
			name:    "first set draws at once, without a rate measured over a moment",
			size:    -1,
			desc:    "receiving",
			steps:   []step{{time.Millisecond, 64 << 10}},
			draws:   1,
			last:    []string{"receiving (average - MB/s) 64.0 KiB, - MB/s"},
			notLast: []string{"65.5", "65536"},
		},
		{
			name:    "a stream that ends within progressEvery of the last line has no rate measured over a moment",
			size:    -1,
			desc:    "receiving",
			steps:   []step{{time.Millisecond, 64 << 10}, {time.Millisecond, -1}},
			endAt:   64 << 20,
			draws:   2,
			last:    []string{"receiving (average 33554.4 MB/s) 64.0 MiB, - MB/s", "\n"},
			notLast: []string{"67108.9"},
		},
		{
			name:  "throttled",
			size:  -1,
			desc:  "receiving",
			steps: []step{{progressEvery, 1}, {progressEvery / 2, 2}, {progressEvery / 4, 3}, {progressEvery / 4, 4}, {progressEvery / 4, 5}},
			draws: 2,
			last:  []string{" 4 B, "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			var out bytes.Buffer
			p := newProgressClock(&out, tt.size, tt.desc, func() time.Time { return now })
			for _, s := range tt.steps {
				now = now.Add(s.after)
				if s.set < 0 {
					p.End(tt.endAt)
				} else {
					p.Set(s.set)
				}
			}
			got := out.String()
			if n := strings.Count(got, "\r"); n != tt.draws {
				t.Errorf("%d lines drawn, want %d: %q", n, tt.draws, got)
			}
			last := got[strings.LastIndex(got, "\r")+1:]
			for _, s := range tt.last {
				if !strings.Contains(last, s) {
					t.Errorf("last line %q lacks %q", last, s)
				}
			}
			for _, s := range tt.notLast {
				if strings.Contains(last, s) {
					t.Errorf("last line %q contains %q", last, s)
				}
			}
		})
	}
}
