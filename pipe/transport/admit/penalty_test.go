package admit

import (
	"fmt"
	"testing"
	"time"
)

// TestPenalties checks the penalties' arithmetic at given times: a failure
// starts a penalty of Step, each further one extends it (to at most Max
// ahead) and halves the source's handshake time down to Floor, an expired
// penalty starts again from nothing, and a full table takes a new source
// only once an old penalty has expired, looking at most once per Step.
func TestPenalties(t *testing.T) {
	policy := PenaltyPolicy{Step: time.Second, Max: 3 * time.Second, Floor: 100 * time.Millisecond, Sources: 2}
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		fail   string // a source that fails at ms, or "" to ask only
		ms     int
		source string
		want   string // Timeout's answer for source at ms, of a full 1600 ms
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"no failure, no penalty", []step{{"", 0, "a", "1.6s false"}}},
		{"one failure halves the time for Step", []step{
			{"a", 0, "a", "800ms true"}, {"", 999, "a", "800ms true"}, {"", 1000, "a", "1.6s false"},
			{"", 0, "b", "1.6s false"},
		}},
		{"each failure halves again, down to the floor", []step{
			{"a", 0, "a", "800ms true"}, {"a", 10, "a", "400ms true"}, {"a", 20, "a", "200ms true"},
			{"a", 30, "a", "100ms true"}, {"a", 40, "a", "100ms true"},
		}},
		{"failures extend the penalty to at most Max ahead", []step{
			{"a", 0, "", ""}, {"a", 0, "", ""}, {"a", 0, "", ""}, {"a", 0, "", ""}, {"a", 0, "", ""},
			{"", 2999, "a", "100ms true"}, {"", 3000, "a", "1.6s false"},
		}},
		{"an expired penalty starts again", []step{
			{"a", 0, "", ""}, {"a", 10, "", ""}, {"a", 5000, "a", "800ms true"},
		}},
		{"a full table takes a new source once a penalty expired", []step{
			{"a", 0, "", ""}, {"b", 500, "", ""}, {"c", 600, "c", "1.6s false"}, {"", 1200, "b", "800ms true"},
			{"c", 1200, "c", "1.6s false"}, {"c", 1600, "c", "800ms true"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPenalties(policy)
			for i, s := range tt.steps {
				if s.fail != "" {
					p.Fail(s.fail, at(s.ms))
				}
				if s.source == "" {
					continue
				}
				d, on := p.Timeout(s.source, at(s.ms), 1600*time.Millisecond)
				if got := fmt.Sprint(d, " ", on); got != s.want {
					t.Errorf("step %d: %s at %d ms: %s, want %s", i, s.source, s.ms, got, s.want)
				}
			}
			if p.Len() > policy.Sources {
				t.Errorf("%d sources remembered, at most %d", p.Len(), policy.Sources)
			}
		})
	}
}

// FuzzPenalties fails arbitrary sources at arbitrary, increasing times:
// the table never holds more than Sources, and a handshake time is never
// above full nor below the floor.
func FuzzPenalties(f *testing.F) {
	f.Add([]byte{1, 2, 3, 1, 1, 1, 200, 4})
	f.Fuzz(func(t *testing.T, steps []byte) {
		policy := PenaltyPolicy{Step: time.Second, Max: 10 * time.Second, Floor: 50 * time.Millisecond, Sources: 4}
		p := NewPenalties(policy)
		now := time.Unix(0, 0)
		for _, b := range steps {
			now = now.Add(time.Duration(b>>4) * 300 * time.Millisecond)
			source := fmt.Sprint(b & 7)
			p.Fail(source, now)
			if p.Len() > policy.Sources {
				t.Fatalf("%d sources remembered", p.Len())
			}
			if d, _ := p.Timeout(source, now, time.Second); d > time.Second || d < policy.Floor {
				t.Fatalf("handshake time %v", d)
			}
		}
	})
}
