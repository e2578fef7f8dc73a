package rdma

import (
	"bytes"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

func TestParseGrant(t *testing.T) {
	a4, a6 := netip.MustParseAddr("10.0.10.2"), netip.MustParseAddr("fd00::2")
	grant := func(r ring, offers ...netip.Addr) []byte { return append(r.marshalGrant(), marshalOffers(offers)...) }
	cases := []struct {
		name   string
		b      []byte
		want   *ring
		offers []netip.Addr
		err    string
	}{
		{"none (send)", nil, nil, nil, ""},
		{"flag clear", make([]byte, grantLen), nil, nil, ""},
		{"one lane", ring{lanes: 1}.marshalGrant(), &ring{lanes: 1}, nil, ""},
		{"striped", ring{lanes: 3, token: 1 << 60}.marshalGrant(), &ring{lanes: 3, token: 1 << 60}, nil, ""},
		{"split", ring{lanes: 2, split: true}.marshalGrant(), &ring{lanes: 2, split: true}, nil, ""},
		{"other devices", grant(ring{lanes: 2, token: 9}, a4, a6), &ring{lanes: 2, token: 9}, []netip.Addr{a4, a6}, ""},
		{"no other device", grant(ring{lanes: 2, token: 9}), &ring{lanes: 2, token: 9}, nil, ""},
		{"offers cut", grant(ring{lanes: 2}, a6)[:grantLen+5], nil, nil, "malformed"},
		{"offer of 5 bytes", append(ring{lanes: 2}.marshalGrant(), 1, 5, 1, 2, 3, 4, 5), nil, nil, "malformed"},
		{"too many offers", append(ring{lanes: 2}.marshalGrant(), maxOffers+1), nil, nil, "more than 8"},
		{"more lanes than asked", ring{lanes: 4}.marshalGrant(), nil, nil, "granted 4 queue pairs where 3 were asked for"},
		{"no lanes", ring{}.marshalGrant(), nil, nil, "granted 0 queue pairs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, offers, err := parseGrant(tc.b, 3)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one saying %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.want == nil && got != nil, tc.want != nil && (got == nil || !reflect.DeepEqual(*got, *tc.want)):
				t.Errorf("grant %+v, want %+v", got, tc.want)
			case !slices.Equal(offers, tc.offers):
				t.Errorf("offers %v, want %v", offers, tc.offers)
			}
		})
	}
}

func TestParseRing(t *testing.T) {
	p := conn.NewParams(4096, 5) // 4 credits
	good := ring{addr: 1 << 30, rkey: 7, stride: 8192, slots: 4, rkeys: []uint32{7, 7}}
	twoNICs := good
	twoNICs.rkeys = []uint32{7, 8}
	cases := []struct {
		name string
		b    []byte
		want ring
		err  string
	}{
		{"good", good.marshal(), good, ""},
		{"one key, no list", ring{addr: 1 << 30, rkey: 7, stride: 8192, slots: 4}.marshal(), good, ""},
		{"a key per lane", twoNICs.marshal(), twoNICs, ""},
		{"none", nil, ring{}, "in 0 bytes, not 20 (or 28 for 2 lanes"},
		{"cut", good.marshal()[:ringLen-1], ring{}, "in 19 bytes"},
		{"too long", append(good.marshal(), 0), ring{}, "in 21 bytes"},
		{"keys for 3 lanes", append(twoNICs.marshal(), 0, 0, 0, 0), ring{}, "in 32 bytes"},
		{"too few slots", ring{stride: 8192, slots: 3}.marshal(), ring{}, "3 slots of 8192 bytes for 4 credits"},
		{"too many slots", ring{stride: 8192, slots: 5}.marshal(), ring{}, "5 slots"},
		{"slots too small", ring{stride: 4096 + conn.TrailerLen - 1, slots: 4}.marshal(), ring{}, "of 4103 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRing(tc.b, p, 2)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one saying %q", err, tc.err)
			case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
				t.Errorf("ring %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestDataPath checks which data path two ends agree on, and that data and
// control messages arrive intact on it: in the ring for writes, control
// messages in a spare.
func TestDataPath(t *testing.T) {
	p := conn.NewParams(8192, 4)
	cases := []struct {
		name         string
		sender, recv bool // SendOnly
		qps          int  // asked for by the sender
		want         string
		wantQPs      int
	}{
		{"both write", false, false, 1, "write", 1},
		{"sender sends", true, false, 1, "send", 1},
		{"receiver sends", false, true, 1, "send", 1},
		{"write over 4 QPs", false, false, 4, "write", 4},
		{"send is one QP", true, false, 4, "send", 1},
		{"at most 16 QPs", false, false, 40, "write", 16},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sopt, ropt := DefaultOptions(), DefaultOptions()
			sopt.SendOnly, ropt.SendOnly = tc.sender, tc.recv
			sopt.QPs = tc.qps
			l := listenRXE(t, p, ropt)
			snd, rcv, err, aerr := dialAccept(timeout(t, 20*time.Second), l, Dialer{Options: sopt}, p)
			if err != nil || aerr != nil {
				t.Fatalf("Dial: %v; Accept: %v", err, aerr)
			}
			t.Cleanup(func() { snd.Close(); rcv.Close() })
			if snd.Info().DataPath != tc.want || rcv.Info().DataPath != tc.want || snd.Info().QPs != tc.wantQPs || rcv.Info().QPs != tc.wantQPs {
				t.Fatalf("data path %q and %q over %d and %d QPs, want %q over %d", snd.Info().DataPath, rcv.Info().DataPath,
					snd.Info().QPs, rcv.Info().QPs, tc.want, tc.wantQPs)
			}
			for k := range 2 * p.Depth {
				n := 1 + k*1000
				want := snd.SendBuf(0)[:n]
				fill(want, k)
				if err := snd.PostSend(0, n); err != nil {
					t.Fatal(err)
				}
				if c := poll(t, snd); c.Op != conn.OpSend {
					t.Fatalf("sender got %+v", c)
				}
				ctrl := []byte{'c', byte(k)}
				if err := snd.SendControl(t.Context(), ctrl); err != nil {
					t.Fatal(err)
				}
				data, note := poll(t, rcv), poll(t, rcv)
				if got := rcv.RecvBuf(data.Buf)[:data.Len]; !bytes.Equal(got, want) {
					t.Fatalf("message %d: %d bytes arrived in buffer %d, want %d others", k, data.Len, data.Buf, n)
				}
				if got := rcv.RecvBuf(note.Buf)[:note.Len]; !bytes.Equal(got, ctrl) {
					t.Fatalf("control message %d: got %q", k, got)
				}
				if tc.want == "write" && (data.Buf >= p.Credits() || note.Buf < p.Credits()) {
					t.Errorf("write path: data in buffer %d, control in %d; want the ring (< %d) and a spare", data.Buf, note.Buf, p.Credits())
				}
				for _, i := range []int{data.Buf, note.Buf} {
					if err := rcv.PostRecv(i); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// TestRingProtocol checks that a receiver offering a ring fails the
// connection when the sender writes to a slot out of turn, and when the
// engine re-posts ring slots out of arrival order (the slot would stay
// unposted, and the sender's next write into it be blamed on the sender).
func TestRingProtocol(t *testing.T) {
	p := conn.NewParams(4096, 4)
	t.Run("write out of turn", func(t *testing.T) {
		snd, rcv := pair(t, p, p, DefaultOptions())
		snd.(*Conn).posts.writes.Add(1) // the next write skips slot 0
		if err := snd.PostSend(0, 100); err != nil {
			t.Fatal(err)
		}
		cs := make([]conn.Completion, 4)
		_, err := rcv.Poll(timeout(t, 10*time.Second), cs)
		if err == nil || !strings.Contains(err.Error(), "wrote ring slot 1 where slot 0 was due: it broke the ring protocol") {
			t.Errorf("receiver: %v, want a ring protocol failure", err)
		}
	})
	t.Run("re-post out of order", func(t *testing.T) {
		snd, rcv := pair(t, p, p, DefaultOptions())
		var got []conn.Completion
		for i := range 2 {
			if err := snd.PostSend(i, 10); err != nil {
				t.Fatal(err)
			}
			got = append(got, poll(t, rcv))
		}
		const why = "ring slot 1 re-posted before slot 0, whose data arrived first"
		if err := rcv.PostRecv(got[1].Buf); conn.KindOf(err) != conn.KindInternal || !strings.Contains(err.Error(), why) {
			t.Errorf("re-posting the second slot first: %v, want a KindInternal error saying %q", err, why)
		}
		if _, err := rcv.Poll(timeout(t, 10*time.Second), make([]conn.Completion, 4)); err == nil || !strings.Contains(err.Error(), "re-post refused: "+why) {
			t.Errorf("receiver's Poll after the refused re-post: %v, want the connection failed by it", err)
		}
		if err := rcv.PostRecv(got[0].Buf); err == nil {
			t.Error("PostRecv on the failed connection succeeded")
		}
	})
}

func TestParseJoin(t *testing.T) {
	j := join{Lane: 3, Token: 0xfeedface12345678}
	if got, ok := parseJoin(j.marshal()); !ok || got != j {
		t.Errorf("parseJoin(marshal(%+v)) = %+v, %v", j, got, ok)
	}
	p, _ := conn.NewParams(4096, 4).MarshalBinary()
	other := j.marshal()
	other[4]++ // another protocol version
	for _, b := range [][]byte{nil, p, j.marshal()[:joinLen-1], other} {
		if _, ok := parseJoin(b); ok {
			t.Errorf("parseJoin(%x) took it for a join", b)
		}
	}
}
