// Package admit decides which handshakes a listener keeps when more
// arrive than it is willing to serve at once: fairly across sources, at
// random between two bounds (OpenSSH's MaxStartups), and never at the
// expense of a handshake that has progressed.
package admit

// Policy bounds the handshakes in progress. A handshake has progressed
// when its peer did something only a real peer does (sent a valid
// proposal, completed its connection); until then it is fresh.
type Policy struct {
	// PerSource (at least 1) is the most fresh handshakes one source
	// holds: a source at it that connects again gives up its own oldest
	// fresh handshake, so that a flood from one source recycles its own
	// slots only, and each lasts as long as the source takes to open
	// PerSource more.
	PerSource int
	// Start and Full (1 <= Start <= Full) bound all the handshakes in
	// progress, progressed ones included. From Start, a newcomer from a
	// source that already holds a fresh handshake is refused with
	// probability Rate, rising linearly to 1 at Full. At Full, a newcomer
	// takes the place of the oldest fresh handshake of the source that
	// holds the most of them (counting the newcomer); with none fresh, the
	// newcomer is refused.
	Start, Full int
	// Rate is the probability of refusal at Start, from 0 to 1.
	Rate float64
}

// Table holds the handshakes in progress under a Policy, identified by
// values of T, in the order they arrived. It is not safe for concurrent
// use.
type Table[T comparable] struct {
	policy  Policy
	rand    func() float64
	entries []entry[T]
}

type entry[T comparable] struct {
	v          T
	source     string
	progressed bool
}

// NewTable returns an empty Table under p, drawing its random refusals
// from rand, which returns numbers in [0, 1) (math/rand/v2.Float64).
func NewTable[T comparable](p Policy, rand func() float64) *Table[T] {
	return &Table[T]{policy: p, rand: rand}
}

// Len returns the number of handshakes in progress.
func (t *Table[T]) Len() int { return len(t.entries) }

// Values returns the handshakes in progress, oldest first.
func (t *Table[T]) Values() []T {
	vs := make([]T, len(t.entries))
	for i, e := range t.entries {
		vs[i] = e.v
	}
	return vs
}

// Arrive decides about a new handshake v from source. When admitted is
// true, v is in the table, and if drop is true, victim is no longer: its
// handshake must be ended. When admitted is false, v must be refused.
func (t *Table[T]) Arrive(source string, v T) (victim T, drop, admitted bool) {
	n, mine := len(t.entries), t.fresh(source)
	switch {
	case mine >= t.policy.PerSource:
		victim, drop = t.oldestFresh(source), true
	case n < t.policy.Start:
	case n < t.policy.Full:
		if mine > 0 && t.rand() < t.refusal(n) {
			return victim, false, false
		}
	default:
		heavy := t.heaviest(source)
		if heavy == source && mine == 0 {
			return victim, false, false // every handshake has progressed
		}
		victim, drop = t.oldestFresh(heavy), true
	}
	if drop {
		t.Leave(victim)
	}
	t.entries = append(t.entries, entry[T]{v: v, source: source})
	return victim, drop, true
}

// Progress marks v as progressed: from now on no newcomer evicts it.
func (t *Table[T]) Progress(v T) {
	for i := range t.entries {
		if t.entries[i].v == v {
			t.entries[i].progressed = true
			return
		}
	}
}

// Leave removes v, whose handshake ended, if it is in the table.
func (t *Table[T]) Leave(v T) {
	for i := range t.entries {
		if t.entries[i].v == v {
			t.entries = append(t.entries[:i], t.entries[i+1:]...)
			return
		}
	}
}

// refusal returns the probability of refusing a newcomer when n
// handshakes are in progress, Start <= n < Full.
func (t *Table[T]) refusal(n int) float64 {
	p := t.policy
	return p.Rate + (1-p.Rate)*float64(n-p.Start)/float64(p.Full-p.Start)
}

// fresh returns how many fresh handshakes source holds.
func (t *Table[T]) fresh(source string) int {
	n := 0
	for _, e := range t.entries {
		if e.source == source && !e.progressed {
			n++
		}
	}
	return n
}

// oldestFresh returns the oldest fresh handshake of source, which holds
// at least one.
func (t *Table[T]) oldestFresh(source string) T {
	for _, e := range t.entries {
		if e.source == source && !e.progressed {
			return e.v
		}
	}
	panic("admit: no fresh handshake from " + source)
}

// heaviest returns the source that holds the most fresh handshakes,
// counting one more for newcomer's; of equals, the one whose oldest fresh
// handshake is the oldest, newcomer's last.
func (t *Table[T]) heaviest(newcomer string) string {
	counts := map[string]int{}
	var order []string // the sources, by their oldest fresh handshake
	for _, e := range t.entries {
		if !e.progressed {
			if counts[e.source] == 0 {
				order = append(order, e.source)
			}
			counts[e.source]++
		}
	}
	if counts[newcomer] == 0 {
		order = append(order, newcomer)
	}
	counts[newcomer]++
	best := order[0]
	for _, s := range order[1:] {
		if counts[s] > counts[best] {
			best = s
		}
	}
	return best
}
