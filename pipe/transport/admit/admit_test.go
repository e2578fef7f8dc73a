package admit

import (
	"fmt"
	"testing"
)

// op is one step of a table test: a handshake v from source arrives
// (want says what Arrive must decide), or progresses, or leaves.
type op struct {
	do     string // "arrive", "progress" or "leave"
	source string
	v      int
	want   string // for arrive: "admit", "refuse" or "admit, drop N"
}

func arrive(source string, v int, want string) op { return op{"arrive", source, v, want} }
func progress(v int) op                           { return op{do: "progress", v: v} }
func leave(v int) op                              { return op{do: "leave", v: v} }

func TestTable(t *testing.T) {
	small := Policy{PerSource: 2, Start: 3, Full: 4, Rate: 0.5}
	tests := []struct {
		name   string
		policy Policy
		rand   float64 // what every random draw returns
		ops    []op
		left   []int // the handshakes in the table at the end, oldest first
	}{
		{"below start every newcomer is admitted", small, 0, []op{
			arrive("a", 1, "admit"), arrive("b", 2, "admit"), arrive("c", 3, "admit"),
		}, []int{1, 2, 3}},
		{"a source at its bound gives up its own oldest fresh one", small, 0.99, []op{
			arrive("a", 1, "admit"), arrive("a", 2, "admit"), arrive("a", 3, "admit, drop 1"),
			arrive("a", 4, "admit, drop 2"),
		}, []int{3, 4}},
		{"a progressed handshake is not counted against its source", small, 0.99, []op{
			arrive("a", 1, "admit"), progress(1), arrive("a", 2, "admit"), arrive("a", 3, "admit"),
			arrive("a", 4, "admit, drop 2"),
		}, []int{1, 3, 4}},
		{"between the bounds a repeat source is refused at random", small, 0.49, []op{
			arrive("a", 1, "admit"), arrive("b", 2, "admit"), arrive("c", 3, "admit"),
			arrive("a", 4, "refuse"), arrive("b", 5, "refuse"),
		}, []int{1, 2, 3}},
		{"between the bounds a repeat source passes a lucky draw", small, 0.5, []op{
			arrive("a", 1, "admit"), arrive("b", 2, "admit"), arrive("c", 3, "admit"),
			arrive("a", 4, "admit"),
		}, []int{1, 2, 3, 4}},
		{"between the bounds a new source is never refused", small, 0.99, []op{
			arrive("a", 1, "admit"), arrive("b", 2, "admit"), arrive("c", 3, "admit"),
			arrive("d", 4, "admit"),
		}, []int{1, 2, 3, 4}},
		{"at full the heaviest source gives up its oldest", small, 0, []op{
			arrive("a", 1, "admit"), arrive("b", 2, "admit"), arrive("a", 3, "admit"),
			arrive("c", 4, "admit"), arrive("d", 5, "admit, drop 1"),
		}, []int{2, 3, 4, 5}},
		{"at full, of equal sources the one with the oldest gives way", small, 0, []op{
			arrive("a", 1, "admit"), arrive("b", 2, "admit"), arrive("c", 3, "admit"),
			arrive("d", 4, "admit"), arrive("b", 5, "admit, drop 2"),
		}, []int{1, 3, 4, 5}},
		{"at full a newcomer of a heavy source evicts its own", Policy{PerSource: 3, Start: 3, Full: 4, Rate: 0.5}, 0.99, []op{
			arrive("a", 1, "admit"), arrive("b", 2, "admit"), arrive("c", 3, "admit"),
			arrive("c", 4, "admit"), arrive("c", 5, "admit, drop 3"),
		}, []int{1, 2, 4, 5}},
		{"progressed handshakes are never evicted, and fill the table", small, 0, []op{
			arrive("a", 1, "admit"), arrive("b", 2, "admit"), arrive("c", 3, "admit"), arrive("d", 4, "admit"),
			progress(1), progress(2), progress(3),
			arrive("e", 5, "admit, drop 4"), progress(5),
			arrive("f", 6, "refuse"), arrive("a", 7, "refuse"),
			leave(2), arrive("f", 8, "admit"),
		}, []int{1, 3, 5, 8}},
		{"leaving an unknown handshake changes nothing", small, 0, []op{
			arrive("a", 1, "admit"), leave(9), progress(9),
		}, []int{1}},
		{"a flood from one source never reaches another's", Policy{PerSource: 3, Start: 8, Full: 8}, 0, []op{
			arrive("real", 1, "admit"),
			arrive("f", 2, "admit"), arrive("f", 3, "admit"), arrive("f", 4, "admit"),
			arrive("f", 5, "admit, drop 2"), arrive("f", 6, "admit, drop 3"), arrive("f", 7, "admit, drop 4"),
		}, []int{1, 5, 6, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := NewTable[int](tt.policy, func() float64 { return tt.rand })
			for i, o := range tt.ops {
				switch o.do {
				case "arrive":
					victim, drop, ok := tab.Arrive(o.source, o.v)
					if got := decision(victim, drop, ok); got != o.want {
						t.Fatalf("step %d: %s arrives from %s: got %q, want %q", i, fmt.Sprint(o.v), o.source, got, o.want)
					}
				case "progress":
					tab.Progress(o.v)
				case "leave":
					tab.Leave(o.v)
				}
			}
			if got := tab.Values(); fmt.Sprint(got) != fmt.Sprint(tt.left) {
				t.Fatalf("left %v, want %v", got, tt.left)
			}
			if tab.Len() != len(tt.left) {
				t.Fatalf("Len %d, want %d", tab.Len(), len(tt.left))
			}
		})
	}
}

// TestRefusalRises checks the probability of a random refusal: Rate at
// Start, rising linearly towards 1 at Full.
func TestRefusalRises(t *testing.T) {
	tab := NewTable[int](Policy{PerSource: 100, Start: 10, Full: 20, Rate: 0.3}, nil)
	for _, c := range []struct {
		n    int
		want float64
	}{{10, 0.3}, {15, 0.65}, {19, 0.93}} {
		if got := tab.refusal(c.n); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("refusal(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func decision(victim int, drop, ok bool) string {
	switch {
	case !ok:
		return "refuse"
	case drop:
		return fmt.Sprintf("admit, drop %d", victim)
	}
	return "admit"
}
