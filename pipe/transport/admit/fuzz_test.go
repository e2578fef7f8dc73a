package admit

import "testing"

// FuzzTable drives a Table with arbitrary arrivals, progress and leaves
// from a few sources, and checks after each step what the Policy
// promises: the table never holds more than Full, nor a source more than
// PerSource fresh handshakes; a progressed handshake is never evicted;
// and a newcomer evicts only its own source's or one of a source that
// holds more fresh handshakes than its own.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, uint8(2), uint8(3), uint8(6))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 64, 0, 128, 0}, uint8(1), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, ops []byte, per, start, full uint8) {
		p := Policy{PerSource: 1 + int(per%16), Start: 1 + int(start%32), Rate: 0.3}
		p.Full = p.Start + int(full%32)
		draw := 0
		rand := func() float64 { draw++; return float64(draw%10) / 10 }
		tab := NewTable[int](p, rand)
		progressed := map[int]bool{}
		for i, b := range ops {
			v, source := i+1, string(rune('a'+b%4))
			switch b >> 6 {
			case 0, 1:
				before := map[string]int{}
				for _, e := range tab.entries {
					if !e.progressed {
						before[e.source]++
					}
				}
				victim, drop, ok := tab.Arrive(source, v)
				if drop {
					if !ok {
						t.Fatalf("step %d: a victim for a refused newcomer", i)
					}
					if progressed[victim] {
						t.Fatalf("step %d: progressed handshake %d evicted", i, victim)
					}
					vs := string(rune('a' + ops[victim-1]%4))
					if vs != source && before[vs] <= before[source] {
						t.Fatalf("step %d: %s (%d fresh) evicted for %s (%d fresh)", i, vs, before[vs], source, before[source])
					}
				}
			case 2:
				v := int(b%32) + 1
				for _, e := range tab.entries {
					progressed[v] = progressed[v] || e.v == v
				}
				tab.Progress(v)
			case 3:
				tab.Leave(int(b%32) + 1)
			}
			if tab.Len() > p.Full {
				t.Fatalf("step %d: %d handshakes, Full is %d", i, tab.Len(), p.Full)
			}
			for s := range 4 {
				if n := tab.fresh(string(rune('a' + s))); n > p.PerSource {
					t.Fatalf("step %d: source %c holds %d fresh, PerSource is %d", i, 'a'+s, n, p.PerSource)
				}
			}
		}
	})
}
