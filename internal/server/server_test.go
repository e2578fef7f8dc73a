package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
)

// memListener hands out the receiver ends of in-memory pairs, and accept
// errors, in the order the test gives them.
type memListener struct {
	conns chan conn.Conn
	errs  chan error
}

func (m *memListener) Accept(ctx context.Context) (conn.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case err := <-m.errs:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *memListener) SetBusy(bool) {}
func (m *memListener) Addr() string { return "mem" }
func (m *memListener) Close() error { return nil }

// TestFloodDropsOldest connects silent peers (they never answer the
// handshake) before the real sender: however many there are, the real
// sender gets through, since the oldest handshake is dropped to make room.
func TestFloodDropsOldest(t *testing.T) {
	for _, silent := range []int{0, handshakePolicy().PerSource - 1, handshakePolicy().PerSource, 4 * handshakePolicy().Full} {
		t.Run(fmt.Sprintf("%d silent", silent), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			key := bytes.Repeat([]byte{7}, 32)
			p := conn.NewParams(4096, 4)
			cfg := pipe.ReceiveConfig{Key: key, Timeout: time.Minute} // silent handshakes last 10 s
			l := &memListener{conns: make(chan conn.Conn)}
			var out bytes.Buffer
			done := make(chan error, 1)
			go func() {
				srv := Server{Listener: l, Out: &out, Config: cfg, Log: io.Discard, Wait: time.Minute}
				_, err := srv.Serve(ctx)
				done <- err
			}()
			for range silent {
				s, r, err := memconn.Pair(p, p, memconn.Faults{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				l.conns <- r
			}
			s, r, err := memconn.Pair(p, p, memconn.Faults{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			l.conns <- r
			if _, err := pipe.Send(ctx, s, strings.NewReader("the real stream"), pipe.SendConfig{Key: cfg.Key, Timeout: cfg.Timeout, HandshakeTimeout: cfg.HandshakeTimeout}); err != nil {
				t.Fatalf("real sender after %d silent ones: %v", silent, err)
			}
			if err := <-done; err != nil || out.String() != "the real stream" {
				t.Fatalf("receiver: %v, wrote %q", err, out.String())
			}
		})
	}
}

// fromHost is the receiver end of an in-memory pair that says it comes
// from host.
type fromHost struct {
	*memconn.Conn
	host string
}

func (c fromHost) Info() conn.Info {
	i := c.Conn.Info()
	i.Remote = c.host + ":40000"
	return i
}

// TestFloodSparesOtherHosts starts the real sender's handshake (the
// Server has sent its hello) and then floods the Server from another host
// with peers that never answer theirs, four times as many as it
// handshakes with at once: the flood recycles its own host's slots (each
// dropped one is logged as such), and the real sender, answering only
// now, still gets through.
func TestFloodSparesOtherHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := bytes.Repeat([]byte{7}, 32)
	p := conn.NewParams(4096, 4)
	cfg := pipe.ReceiveConfig{Key: key, Timeout: time.Minute, HandshakeTimeout: time.Minute}
	l := &memListener{conns: make(chan conn.Conn)}
	var out, log testutil.Buffer
	done := make(chan error, 1)
	go func() {
		srv := Server{Listener: l, Out: &out, Config: cfg, Log: &log, Prog: "rdmatest"}
		_, err := srv.Serve(ctx)
		done <- err
	}()
	s, r, err := memconn.Pair(p, p, memconn.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l.conns <- fromHost{r, "10.0.0.2"}
	for range 4 * handshakePolicy().Full {
		fs, fr, err := memconn.Pair(p, p, memconn.Faults{})
		if err != nil {
			t.Fatal(err)
		}
		defer fs.Close()
		l.conns <- fromHost{fr, "10.0.0.1"}
	}
	if _, err := pipe.Send(ctx, s, strings.NewReader("the real stream"), pipe.SendConfig{Key: cfg.Key, Timeout: cfg.Timeout, HandshakeTimeout: cfg.HandshakeTimeout}); err != nil {
		t.Fatalf("the real sender after the flood: %v", err)
	}
	if err := <-done; err != nil || out.String() != "the real stream" {
		t.Fatalf("receiver: %v, wrote %q", err, out.String())
	}
	if want := "rdmatest: refused a connection: handshake: dropped for a newer connection"; !strings.Contains(log.String(), want) {
		t.Errorf("logged %q, want %q in it", log.String(), want)
	}
}

// TestServe checks how a Server ends: a stream served, with Keep the next
// ones, a refused sender that does not end it, no sender within Wait, a
// failure of local resources, and Served saying no more.
func TestServe(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	p := conn.NewParams(4096, 4)
	cfg := pipe.ReceiveConfig{Key: key, Timeout: time.Minute}
	// a sender: its stream, the key it uses, and the data message the
	// link damages (0: none)
	type sender struct {
		data    string
		key     []byte
		corrupt int
	}
	bad := strings.Repeat("a stream damaged on the way ", 4096)
	tests := []struct {
		name    string
		keep    bool
		wait    time.Duration
		senders []sender
		errs    []error // accept errors, before the senders
		more    bool    // what Served says
		open    bool    // each stream to its own output (Open)
		want    string  // what Out gets, or the outputs committed, each ended with "|"
		partial bool    // Out ends with part of a stream after want
		err     string  // what Serve's error says, "" for none
		kind    conn.Kind
		logged  string // what Log gets, in part
	}{
		{name: "one stream", senders: []sender{{"abc", key, 0}}, more: true, want: "abc"},
		{name: "a wrong key is refused, the real sender served", senders: []sender{{"no", []byte("another key of 32 bytes, really!"), 0}, {"abc", key, 0}},
			more: true, want: "abc", logged: "rdmatest: refused a connection: "},
		{name: "keep: streams one after the other", keep: true, senders: []sender{{"abc", key, 0}, {"def", key, 0}}, more: true,
			want: "abcdef"},
		{name: "keep, but Served says no more", keep: true, senders: []sender{{"abc", key, 0}}, more: false, want: "abc"},
		{name: "keep: a failed stream in the one output ends it", keep: true, senders: []sender{{"abc", key, 0}, {bad, key, 10}},
			more: true, want: "abc", partial: true, err: "1 of 2 streams failed, the last: ", kind: conn.KindIntegrity},
		{name: "keep and Open: a failed stream fails only itself", keep: true, open: true,
			senders: []sender{{"abc", key, 0}, {bad, key, 10}, {"def", key, 0}}, more: true, want: "abc|def|",
			err: "1 of 3 streams failed, the last: ", kind: conn.KindIntegrity, logged: "rdmatest: stream 2 from mem:sender failed: verify stream: "},
		{name: "Open: one stream", open: true, senders: []sender{{"abc", key, 0}}, more: true, want: "abc|"},
		{name: "Open: one failed stream", open: true, senders: []sender{{bad, key, 10}}, more: true,
			err: "does not match its tag", kind: conn.KindIntegrity},
		{name: "no sender within Wait", wait: 50 * time.Millisecond, err: "no sender claimed the receiver within 50ms", kind: conn.KindSetup},
		{name: "local resources", errs: []error{&conn.Error{Kind: conn.KindSetup, Op: "accept", Err: conn.ErrLocal}},
			err: "local resources", kind: conn.KindSetup, logged: "refused a connection: accept: local resources"},
		{name: "keep survives local resources", keep: true, errs: []error{&conn.Error{Kind: conn.KindSetup, Op: "accept", Err: conn.ErrLocal}},
			senders: []sender{{"abc", key, 0}}, more: true, want: "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			l := &memListener{conns: make(chan conn.Conn), errs: make(chan error, len(tt.errs))}
			for _, err := range tt.errs {
				l.errs <- err
			}
			var out, log, landed testutil.Buffer
			streams := make(chan struct{}, len(tt.senders))
			srv := Server{Listener: l, Out: &out, Config: cfg, Log: &log, Prog: "rdmatest", Keep: tt.keep, Wait: tt.wait,
				Served: func(st pipe.Stats, err error) (error, bool) {
					streams <- struct{}{}
					return err, tt.more
				}}
			if tt.open {
				srv.Open = bufferOutput(&landed)
			}
			done := make(chan error, 1)
			go func() {
				_, err := srv.Serve(ctx)
				done <- err
			}()
			for _, snd := range tt.senders {
				for {
					s, r, err := memconn.Pair(p, p, memconn.Faults{CorruptAt: snd.corrupt})
					if err != nil {
						t.Fatal(err)
					}
					defer s.Close()
					select {
					case l.conns <- r:
					case err := <-done:
						t.Fatalf("Serve ended before sender %q: %v", snd.data, err)
					}
					c := pipe.SendConfig{Key: snd.key, Timeout: cfg.Timeout}
					_, err = pipe.Send(ctx, s, strings.NewReader(snd.data), c)
					if conn.KindOf(err) == conn.KindBusy && ctx.Err() == nil {
						// The server has not yet seen the last stream end (its
						// sender returns once the data is confirmed): try again,
						// as rdmasend does.
						continue
					}
					if err != nil {
						t.Logf("sender %.20q: %v", snd.data, err)
					}
					if !bytes.Equal(snd.key, key) {
						// Serve ends with the real stream: the refusal must
						// be logged before it comes.
						testutil.WaitFor(t, 30*time.Second, "the refusal logged", func() bool { return strings.Contains(log.String(), "refused a connection") })
					}
					break
				}
			}
			if tt.keep && tt.more {
				// Every stream is written (Send returned once the receiver
				// confirmed it); once Serve has seen each end, it is idle.
				for range tt.senders {
					<-streams
				}
				cancel()
			}
			err := <-done
			got := out.String()
			if tt.open {
				got = landed.String()
			}
			if tt.partial && strings.HasPrefix(got, tt.want) && len(got) < len(tt.want)+len(bad) {
				got = tt.want
			}
			switch {
			case tt.err == "" && err != nil, tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || conn.KindOf(err) != tt.kind):
				t.Errorf("Serve = %v (kind %v), want an error saying %q (kind %v)", err, conn.KindOf(err), tt.err, tt.kind)
			case got != tt.want:
				t.Errorf("wrote %.40q, want %q", got, tt.want)
			case !strings.Contains(log.String(), tt.logged):
				t.Errorf("logged %q, want %q in it", log.String(), tt.logged)
			}
		})
	}
}

// bufferOutput is an Open that writes each stream to a buffer of its own
// and, when one is committed, appends it to landed, ended with "|"; it
// checks that End is told of the commit.
func bufferOutput(landed *testutil.Buffer) func(Stream) (*Output, error) {
	return func(Stream) (*Output, error) {
		var b bytes.Buffer
		committed := false
		return &Output{W: &b,
			Commit: func() error {
				committed = true
				landed.Write(append(b.Bytes(), '|'))
				return nil
			},
			End: func(err error) error {
				switch {
				case committed:
					return nil
				case err == nil:
					return errors.New("a stream confirmed without its commit")
				}
				return err
			},
		}, nil
	}
}

// TestGoOn checks when a Server goes on to the next sender after a
// claimed stream.
func TestGoOn(t *testing.T) {
	failed := errors.New("failed")
	for _, tc := range []struct {
		keep, own, more, stuck, cancelled bool
		err                               error
		want                              bool
	}{
		{keep: false, more: true, want: false},
		{keep: true, more: true, want: true},
		{keep: true, own: true, more: true, want: true},
		{keep: true, more: true, err: failed, want: false}, // the one output holds part of a stream
		{keep: true, own: true, more: true, err: failed, want: true},
		{keep: true, own: true, more: false, err: failed, want: false},
		{keep: true, own: true, more: true, stuck: true, err: failed, want: false},
		{keep: true, own: true, more: true, cancelled: true, want: false},
		{keep: true, more: true, cancelled: true, want: false},
	} {
		if got := goOn(tc.keep, tc.own, tc.more, tc.stuck, tc.cancelled, tc.err); got != tc.want {
			t.Errorf("goOn(keep %v, own %v, more %v, stuck %v, cancelled %v, %v) = %v, want %v", tc.keep, tc.own, tc.more, tc.stuck, tc.cancelled, tc.err, got, tc.want)
		}
	}
}

// TestRejoin runs sender -> relay -> Server and cuts the link into the
// relay mid-stream: the sender repairs the chain by connecting to the
// Server (its fallback, the place after the relay), whose Server hands the
// new connection to the stream waiting for it, so the output is the input
// exactly; without Rejoin the stream fails.
func TestRejoin(t *testing.T) {
	for _, rejoin := range []bool{true, false} {
		t.Run(fmt.Sprintf("rejoin=%v", rejoin), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			key := bytes.Repeat([]byte{9}, 32)
			p := conn.NewParams(4096, 4)
			in := bytes.Repeat([]byte("a stream that loses its link and comes back "), 20000)
			l := &memListener{conns: make(chan conn.Conn, 2)}
			var out testutil.Buffer
			done := make(chan error, 1)
			go func() {
				srv := Server{Listener: l, Out: &out, Config: pipe.ReceiveConfig{Key: key, Timeout: 2 * time.Second, HandshakeTimeout: time.Second}, Log: io.Discard, Rejoin: rejoin}
				_, err := srv.Serve(ctx)
				done <- err
			}()
			toServer := func(ctx context.Context, addr string) (conn.Conn, error) {
				s, r, err := memconn.Pair(p, p, memconn.Faults{})
				if err != nil {
					return nil, err
				}
				l.conns <- r
				return s, nil
			}
			s1, r1, err := memconn.Pair(p, p, memconn.Faults{CutAt: 40})
			if err != nil {
				t.Fatal(err)
			}
			defer s1.Close()
			go pipe.Receive(ctx, r1, io.Discard, pipe.ReceiveConfig{Key: key, Timeout: 2 * time.Second, HandshakeTimeout: time.Second, Relay: pipe.RelayConfig{To: "server", Dial: toServer}})
			cfg := pipe.SendConfig{Key: key, Timeout: 2 * time.Second, HandshakeTimeout: time.Second, Repair: true, Fallback: []pipe.Hop{{Addr: "server"}}, Dial: toServer}
			st, sendErr := pipe.Send(ctx, s1, bytes.NewReader(in), cfg)
			recvErr := <-done
			if !rejoin {
				if sendErr == nil || recvErr == nil {
					t.Fatalf("send: %v, receive: %v; want both to fail without Rejoin", sendErr, recvErr)
				}
				return
			}
			if sendErr != nil || recvErr != nil {
				t.Fatalf("send: %v, receive: %v", sendErr, recvErr)
			}
			if !bytes.Equal(out.Bytes(), in) {
				t.Errorf("wrote %d bytes, want %d identical ones", out.Len(), len(in))
			}
			if len(st.Lost) != 1 {
				t.Errorf("the sender lost %q, want the relay", st.Lost)
			}
		})
	}
}

// TestCancelledWhileRelaySetUp ends the Server's context while the one
// sender's relay is being set up, which then fails: the claim given back,
// no stream was served, and Serve ends with the context rather than
// waiting on for another sender.
func TestCancelledWhileRelaySetUp(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	key := bytes.Repeat([]byte{5}, 32)
	p := conn.NewParams(4096, 4)
	why := errors.New("the next host cannot be reached")
	dial := func(context.Context, string) (conn.Conn, error) {
		cancel(why)
		return nil, conn.Errorf(conn.KindSetup, "connect next", "no route to host")
	}
	cfg := pipe.ReceiveConfig{Key: key, Timeout: time.Minute, Relay: pipe.RelayConfig{To: "next", Dial: dial}}
	l := &memListener{conns: make(chan conn.Conn, 1)}
	s, r, err := memconn.Pair(p, p, memconn.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l.conns <- r
	done := make(chan error, 1)
	go func() {
		_, err := (&Server{Listener: l, Out: io.Discard, Config: cfg, Log: io.Discard, Wait: time.Hour}).Serve(ctx)
		done <- err
	}()
	if _, err := pipe.Send(t.Context(), s, strings.NewReader("never sent"), pipe.SendConfig{Key: key, Timeout: time.Minute}); err == nil {
		t.Fatal("the sender's stream went through a relay that was not set up")
	}
	var got error
	testutil.WaitFor(t, 10*time.Second, "Serve to end", func() bool {
		select {
		case got = <-done:
			return true
		default:
			return false
		}
	})
	if conn.KindOf(got) != conn.KindAborted || !errors.Is(got, why) {
		t.Fatalf("Serve: %v (%v), want the context's end, aborted", got, conn.KindOf(got))
	}
}

// TestRefusalsDoNotPause hands the Server 500 refused peers, then the real
// sender: the accept loop goes on at once after each refusal (it pauses
// only after the listener's own failures), so the real stream is served
// long before 500 pauses could have passed.
func TestRefusalsDoNotPause(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Bound(20*time.Second))
	defer cancel()
	p := conn.NewParams(4096, 4)
	l := &memListener{conns: make(chan conn.Conn), errs: make(chan error)}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		srv := Server{Listener: l, Out: &out, Log: io.Discard}
		_, err := srv.Serve(ctx)
		done <- err
	}()
	refusal := conn.Refused(conn.Errorf(conn.KindSetup, "accept from 10.0.0.1:40000", "another protocol version"))
	for i := range 500 {
		select {
		case l.errs <- refusal:
		case <-ctx.Done():
			t.Fatalf("the accept loop took only %d of 500 refusals before the deadline", i)
		}
	}
	s, r, err := memconn.Pair(p, p, memconn.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l.conns <- r
	if _, err := pipe.Send(ctx, s, strings.NewReader("the real stream"), pipe.SendConfig{}); err != nil {
		t.Fatalf("real sender after the refusals: %v", err)
	}
	if err := <-done; err != nil || out.String() != "the real stream" {
		t.Fatalf("receiver: %v, wrote %q", err, out.String())
	}
}
