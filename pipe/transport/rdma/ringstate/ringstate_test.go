package ringstate

import (
	"slices"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// step is one event fed to a Ring in a table test.
type step struct {
	op   string // "open", "write", "control" or "repost"
	a, b int    // write: slot, bytes; control: bytes, after (-1: not counted); repost: buffer
	want []conn.Completion
	err  string // what the error says, "" for none
}

// recv is a receive completion of n bytes in buffer i.
func recv(i, n int) conn.Completion { return conn.Completion{Op: conn.OpRecv, Buf: i, Len: n} }

func TestRing(t *testing.T) {
	// Two lanes or one; a ring of 3 slots of 64 bytes, buffers 3 and 4
	// the spares.
	// Each test opens the window first unless closed is set.
	tests := []struct {
		name   string
		lanes  int
		closed bool
		steps  []step
	}{
		{"closed window: writes refused, control messages taken", 1, true, []step{
			{op: "write", a: 0, b: 10, err: "the peer wrote to ring slot 0 before the receiver opened its window"},
			{op: "repost", a: 0, err: "ring slot 0 re-posted before the window was opened"},
			{op: "control", a: 7, b: -1, want: []conn.Completion{recv(3, 7)}},
			{op: "repost", a: 3},
			{op: "open"},
			{op: "write", a: 0, b: 10, want: []conn.Completion{recv(0, 10)}},
			{op: "open"}, // again: nothing changes
			{op: "write", a: 0, b: 10, err: "the peer wrote ring slot 0 where slot 1 was due"},
		}},
		{"writes in turn", 1, false, []step{
			{op: "write", a: 0, b: 10, want: []conn.Completion{recv(0, 10)}},
			{op: "write", a: 1, b: 64, want: []conn.Completion{recv(1, 64)}},
			{op: "repost", a: 0},
			{op: "write", a: 2, b: 0, want: []conn.Completion{recv(2, 0)}},
			{op: "write", a: 0, b: 5, want: []conn.Completion{recv(0, 5)}},
		}},
		{"write out of turn", 1, false, []step{
			{op: "write", a: 1, b: 10, err: "the peer wrote ring slot 1 where slot 0 was due"},
			{op: "write", a: 0, b: 10, want: []conn.Completion{recv(0, 10)}},
		}},
		{"write outside the ring", 2, false, []step{
			{op: "write", a: 3, b: 10, err: "the peer wrote to ring slot 3 of 3"},
			{op: "write", a: -1, b: 10, err: "the peer wrote to ring slot -1 of 3"},
		}},
		{"write into a slot not re-posted", 1, false, []step{
			{op: "write", a: 0, b: 1, want: []conn.Completion{recv(0, 1)}},
			{op: "write", a: 1, b: 1, want: []conn.Completion{recv(1, 1)}},
			{op: "write", a: 2, b: 1, want: []conn.Completion{recv(2, 1)}},
			{op: "write", a: 0, b: 1, err: "the peer wrote ring slot 0 before the receiver freed it"},
		}},
		{"write twice into one slot", 2, false, []step{
			{op: "write", a: 1, b: 1},
			{op: "write", a: 1, b: 2, err: "the peer wrote ring slot 1 before the receiver freed it"},
		}},
		{"write too large", 1, false, []step{
			{op: "write", a: 0, b: 65, err: "the peer wrote 65 bytes into a 64-byte ring slot"},
		}},
		{"striped writes reported in ring order", 2, false, []step{
			{op: "write", a: 2, b: 3},
			{op: "write", a: 1, b: 2},
			{op: "write", a: 0, b: 1, want: []conn.Completion{recv(0, 1), recv(1, 2), recv(2, 3)}},
		}},
		{"control messages take the oldest spare", 1, false, []step{
			{op: "control", a: 7, b: -1, want: []conn.Completion{recv(3, 7)}},
			{op: "control", a: 8, b: -1, want: []conn.Completion{recv(4, 8)}},
			{op: "repost", a: 3},
			{op: "control", a: 9, b: -1, want: []conn.Completion{recv(3, 9)}},
		}},
		{"more control messages than spares", 1, false, []step{
			{op: "control", a: 7, b: -1, want: []conn.Completion{recv(3, 7)}},
			{op: "control", a: 8, b: -1, want: []conn.Completion{recv(4, 8)}},
			{op: "control", a: 9, b: 2, err: "the peer sent more control messages than the receiver had room for (this one: 9 bytes, immediate true 2)"},
		}},
		{"control held until the data it counts", 2, false, []step{
			{op: "control", a: 7, b: 2},
			{op: "control", a: 8, b: 0}, // counts nothing, but may not overtake the first
			{op: "write", a: 1, b: 2},
			{op: "write", a: 0, b: 1, want: []conn.Completion{recv(0, 1), recv(1, 2), recv(3, 7), recv(4, 8)}},
		}},
		{"an uncounted control message waits behind a held one", 2, false, []step{
			{op: "control", a: 7, b: 1},
			{op: "control", a: 8, b: -1},
			{op: "write", a: 0, b: 1, want: []conn.Completion{recv(0, 1), recv(3, 7), recv(4, 8)}},
		}},
		{"control counting data already reported", 2, false, []step{
			{op: "write", a: 0, b: 1, want: []conn.Completion{recv(0, 1)}},
			{op: "control", a: 7, b: 1, want: []conn.Completion{recv(3, 7)}},
		}},
		{"a held control message's spare is not posted", 2, false, []step{
			{op: "control", a: 7, b: 1},
			{op: "repost", a: 3, err: "receive buffer 3 is already posted"},
		}},
		{"re-post out of arrival order", 1, false, []step{
			{op: "write", a: 0, b: 1, want: []conn.Completion{recv(0, 1)}},
			{op: "write", a: 1, b: 1, want: []conn.Completion{recv(1, 1)}},
			{op: "repost", a: 1, err: "ring slot 1 re-posted before slot 0, whose data arrived first"},
			{op: "repost", a: 0},
			{op: "repost", a: 1},
		}},
		{"re-post of a posted buffer", 1, false, []step{
			{op: "repost", a: 0, err: "receive buffer 0 is already posted"},
			{op: "repost", a: 4, err: "receive buffer 4 is already posted"},
			{op: "repost", a: 5, err: "receive buffer 5 out of range"},
		}},
		{"re-post of a slot written but not reported", 2, false, []step{
			{op: "write", a: 1, b: 1},
			{op: "repost", a: 1, err: "receive buffer 1 is already posted"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(3, 2, 64, tt.lanes)
			if !tt.closed {
				r.Open()
			}
			for k, s := range tt.steps {
				var got []conn.Completion
				var err error
				switch s.op {
				case "open":
					r.Open()
				case "write":
					got, err = r.Write(nil, s.a, s.b)
				case "control":
					_, got, err = r.Control(nil, s.a, s.b >= 0, uint32(max(s.b, 0)))
				case "repost":
					err = r.Repost(s.a)
				}
				switch {
				case s.err == "" && err != nil:
					t.Fatalf("step %d (%s %d %d): %v", k, s.op, s.a, s.b, err)
				case s.err != "" && (err == nil || err.Error() != s.err):
					t.Fatalf("step %d (%s %d %d): error %v, want %q", k, s.op, s.a, s.b, err, s.err)
				case !slices.Equal(got, s.want):
					t.Fatalf("step %d (%s %d %d): reported %v, want %v", k, s.op, s.a, s.b, got, s.want)
				}
			}
		})
	}
}

// model is what a ring's receiver may do, kept independently of Ring: the
// fuzz target checks every answer of a Ring against it.
type model struct {
	slots, spares, size int
	striped             bool
	open                bool // the window is open: the slots are posted

	free      []bool // per slot: the sender may write it (posted, not written since)
	written   []int  // per slot: bytes written and not yet reported, -1 if none
	due       int    // the slot whose data is reported next
	reported  uint32 // data messages reported
	engine    []int  // slots reported and not re-posted, in the order reported
	engSpares []int  // spares reported and not re-posted
	controls  []ctrl // control messages accepted and not yet reported, in arrival order
}

// ctrl is a control message accepted by the ring.
type ctrl struct {
	spare, n int
	counted  bool
	after    uint32
}

// writable reports whether the sender may write n bytes into slot now.
func (m *model) writable(slot, n int) bool {
	return m.open && slot >= 0 && slot < m.slots && (m.striped || slot == m.due) && m.free[slot] && n >= 0 && n <= m.size
}

// freeSpares returns how many spares hold no message.
func (m *model) freeSpares() int { return m.spares - len(m.engSpares) - len(m.controls) }

// busy reports whether spare j holds a message, reported or not.
func (m *model) busy(j int) bool {
	return slices.Contains(m.engSpares, j) || slices.ContainsFunc(m.controls, func(c ctrl) bool { return c.spare == j })
}

// repostable reports whether the engine may re-post buffer i now.
func (m *model) repostable(i int) bool {
	if i < m.slots {
		return m.open && len(m.engine) > 0 && m.engine[0] == i
	}
	return slices.Contains(m.engSpares, i)
}

// check takes the completions a Ring reported, failing t where one breaks
// the ring's rules, and then checks that nothing reportable is held back.
func (m *model) check(t *testing.T, cs []conn.Completion) {
	t.Helper()
	for _, c := range cs {
		switch {
		case c.Op != conn.OpRecv:
			t.Fatalf("reported %+v: not a receive", c)
		case c.Buf < m.slots:
			if c.Buf != m.due {
				t.Fatalf("reported slot %d where slot %d was next in ring order", c.Buf, m.due)
			}
			if slices.Contains(m.engine, c.Buf) {
				t.Fatalf("reported slot %d twice without a re-post", c.Buf)
			}
			if m.written[c.Buf] < 0 || c.Len != m.written[c.Buf] {
				t.Fatalf("reported slot %d with %d bytes; the sender wrote %d there", c.Buf, c.Len, m.written[c.Buf])
			}
			m.written[c.Buf] = -1
			m.engine = append(m.engine, c.Buf)
			m.due = (m.due + 1) % m.slots
			m.reported++
		default:
			if len(m.controls) == 0 {
				t.Fatalf("reported %+v, but no control message is waiting", c)
			}
			first := m.controls[0]
			if c.Buf != first.spare || c.Len != first.n {
				t.Fatalf("reported %+v, want the oldest control message: %d bytes in spare %d", c, first.n, first.spare)
			}
			if first.counted && int32(m.reported-first.after) < 0 {
				t.Fatalf("reported a control message that counts %d data messages after only %d", first.after, m.reported)
			}
			m.controls = m.controls[1:]
			m.engSpares = append(m.engSpares, c.Buf)
		}
	}
	if m.written[m.due] >= 0 {
		t.Fatalf("slot %d was written and is next in ring order, but is not reported", m.due)
	}
	if len(m.controls) > 0 && (!m.controls[0].counted || int32(m.reported-m.controls[0].after) >= 0) {
		t.Fatalf("control message %+v held back after %d data messages", m.controls[0], m.reported)
	}
}

// FuzzRing feeds a Ring random interleavings of writes, control messages,
// re-posts and the opening of its window, most of them what a correct sender and engine would do,
// some not, and checks every answer against a model: data is reported in
// ring order, each slot once per re-post; a write or re-post the rules do
// not allow (a write or a slot's re-post before the window opened among
// them) is refused, and one they allow accepted; spares are never used
// twice over; control messages come in order, each only after the data it
// counts; nothing reportable is held back; and a refusal changes nothing.
func FuzzRing(f *testing.F) {
	f.Add([]byte{3, 2, 0, 7, 0, 0, 0, 1, 0, 0, 9, 3, 5, 4, 0, 1, 1, 3, 5, 0, 0})
	f.Add([]byte{4, 2, 1, 7, 0, 0, 0, 1, 0, 2, 1, 1, 1, 0, 3, 7, 1, 0, 1, 5, 4, 0, 5, 3, 2, 40})
	f.Add([]byte{1, 0, 2, 2, 200, 3, 1, 5, 9, 7, 0, 0, 0, 1, 0, 1, 0, 4, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 3 {
			return
		}
		slots, spares, lanes := 1+int(b[0])%8, int(b[1])%4, 1+int(b[2])%3
		const size = 64
		r := New(slots, spares, size, lanes)
		m := &model{slots: slots, spares: spares, size: size, striped: lanes > 1,
			free: make([]bool, slots), written: make([]int, slots)}
		for i := range slots {
			m.free[i], m.written[i] = true, -1
		}
		// The sender: it writes data message k into slot k mod slots once
		// the window is open and the slot re-posted (credits), and the
		// writes it posted arrive in any order with lanes, in order with
		// one.
		var inflight []int
		posted, credits := 0, 0
		for ops := b[3:]; len(ops) >= 2; ops = ops[2:] {
			op, arg := ops[0]%8, int(ops[1])
			var cs []conn.Completion
			var err error
			valid := true
			switch op {
			case 0: // the sender posts a write
				if credits > 0 {
					inflight = append(inflight, posted)
					posted++
					credits--
				}
				continue
			case 1, 2: // a posted write arrives, or any write
				slot, n := arg%(slots+1), arg%(size+2)
				if op == 1 {
					if len(inflight) == 0 {
						continue
					}
					j := 0
					if lanes > 1 {
						j = arg % len(inflight)
					}
					slot, n = inflight[j]%slots, arg%(size+1)
					inflight = slices.Delete(inflight, j, j+1)
				}
				valid = m.writable(slot, n)
				cs, err = r.Write(nil, slot, n)
				if valid && err == nil {
					m.free[slot], m.written[slot] = false, n
				}
			case 3: // a control message
				n, counted, after := 1+arg%conn.MaxControl, lanes > 1 && arg%3 != 0, uint32(posted)
				if arg%5 == 0 {
					after += uint32(arg % 4) // claims data not (yet) posted
				}
				valid = m.freeSpares() > 0
				var spare int
				spare, cs, err = r.Control(nil, n, counted, after)
				if valid && err == nil {
					if spare < slots || spare >= slots+spares || m.busy(spare) {
						t.Fatalf("control message given buffer %d, not a free spare", spare)
					}
					m.controls = append(m.controls, ctrl{spare: spare, n: n, counted: counted, after: after})
				}
			case 4, 5: // the engine re-posts the oldest slot or a spare it holds
				var i int
				switch {
				case op == 4 && len(m.engine) > 0:
					i = m.engine[0]
				case op == 5 && len(m.engSpares) > 0:
					i = m.engSpares[arg%len(m.engSpares)]
				default:
					continue
				}
				err = r.Repost(i)
				if err == nil {
					m.repost(i, &credits)
				}
			case 7: // the receiver opens its window (again: nothing changes)
				r.Open()
				if !m.open {
					m.open, credits = true, slots
				}
			case 6: // any re-post
				i := arg%(slots+spares+2) - 1
				valid = m.repostable(i)
				err = r.Repost(i)
				if valid && err == nil {
					m.repost(i, &credits)
				}
			}
			switch {
			case valid && err != nil:
				t.Fatalf("op %d %d refused: %v", op, arg, err)
			case !valid && err == nil:
				t.Fatalf("op %d %d accepted against the ring's rules", op, arg)
			case err != nil && len(cs) > 0:
				t.Fatalf("op %d %d refused (%v) but reported %v", op, arg, err, cs)
			}
			m.check(t, cs)
		}
	})
}

// repost takes back buffer i from the engine; a slot gives the sender a
// credit.
func (m *model) repost(i int, credits *int) {
	if i < m.slots {
		m.engine = m.engine[1:]
		m.free[i] = true
		*credits++
		return
	}
	m.engSpares = slices.DeleteFunc(m.engSpares, func(j int) bool { return j == i })
}
