package server

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRefusals checks that a flood of refusals logs RefusalBurst lines a
// second, and then how many it left out.
func TestRefusals(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name  string
		at    []time.Duration // when each refusal comes, after t0
		lines []string
	}{
		{"a few", []time.Duration{0, 1, 2}, []string{"refused a connection: no 0", "refused a connection: no 1", "refused a connection: no 2"}},
		{"a burst, then a refusal a second later", append(make([]time.Duration, 25), time.Second),
			append(repeat(RefusalBurst), "15 more connections refused", "refused a connection: no 25")},
		{"a burst, then nothing", make([]time.Duration, 12), repeat(RefusalBurst)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			var now time.Time
			r := Refusals{W: &out, Prog: "rdmacp", Now: func() time.Time { return now }}
			for i, d := range tt.at {
				now = t0.Add(d)
				r.Log(fmt.Errorf("no %d", i))
			}
			got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if len(got) != len(tt.lines) {
				t.Fatalf("logged %d lines, want %d:\n%s", len(got), len(tt.lines), out.String())
			}
			for i, want := range tt.lines {
				if !strings.HasPrefix(got[i], "rdmacp: ") || !strings.Contains(got[i], want) {
					t.Errorf("line %d: %q, want it to say %q", i, got[i], want)
				}
			}
		})
	}
}

// repeat returns the first n lines of a burst: "refused a connection".
func repeat(n int) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = "refused a connection: no "
	}
	return lines
}
