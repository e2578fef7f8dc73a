package cp

import (
	"errors"
	"slices"
	"testing"
)

// TestRelayedPlan: the sending host's plan reaches the receiving host
// only as a download's local side would take it, with the names checked
// and nothing of what only that side reads; a name only the sending host
// knows is refused, as nothing can tell whether DST is new for it.
func TestRelayedPlan(t *testing.T) {
	cases := []struct {
		name  string
		a     asked
		c     Contents
		claim string // "": taken
	}{
		{"file", asked{srcs: []string{"d/f"}}, Contents{Mode: modeFile, Name: "f", Perm: 0o640, Size: 9}, ""},
		{"file under another name", asked{srcs: []string{"d/f"}}, Contents{Mode: modeFile, Name: ".bashrc"}, ".bashrc"},
		{"archive of several", asked{srcs: []string{"a", "*.txt"}, recursive: true}, Contents{Mode: modeTar, Names: []string{"a", "x.txt"}, Counts: []int{1, 1}}, ""},
		{"one left out", asked{srcs: []string{"a", "b"}}, Contents{Mode: modeTar, Names: []string{"b"}, Counts: []int{0, 1}, Left: 1}, ""},
		{"archive with one more", asked{srcs: []string{"a"}, recursive: true}, Contents{Mode: modeTar, Single: true, Names: []string{"a", ".ssh"}}, "an archive of a, .ssh"},
		{"dot, whose name only that host knows", asked{srcs: []string{"."}, recursive: true}, Contents{Mode: modeTar, Single: true, Names: []string{"alice"}}, "alice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := relayedPlan(tc.a, tc.c)
			var u *unasked
			switch {
			case tc.claim == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.claim != "" && (!errors.As(err, &u) || u.claim != tc.claim):
				t.Fatalf("got %v, want the refusal of %q", err, tc.claim)
			case tc.claim != "":
				return
			}
			if c.Counts != nil || c.Left != 0 || c.Mode != tc.c.Mode || c.Name != tc.c.Name || c.Perm != tc.c.Perm || !slices.Equal(c.Names, tc.c.Names) {
				t.Fatalf("got %+v from %+v", c, tc.c)
			}
			if err := c.validate(); err != nil {
				t.Fatalf("the receiving side would refuse %+v: %v", c, err)
			}
		})
	}
}
