package cp

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/chain"
	"github.com/rdmapipe/rdmapipe/internal/cp/plan"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Between copies the files and directories at srcs, all on one remote
// host, to dst on another (a copy between two remote hosts): the stream
// goes from the one straight to the other, never through this host. It
// starts the sending side as a download's (see ServeSend) with a request
// that says where to connect later, checks its plan against srcs as a
// download does, starts the receiving side as an upload's (see Serve)
// with that plan as its contents and the same one-time key, and tells the
// sending side where the receiving side listens.
func Between(ctx context.Context, srcs []remote.Target, dst remote.Target, o Options) error {
	from := srcs[0]
	key := proto.NewKey()
	req, a := o.fetchRequest(key, srcs)
	req.ConnectLater = true
	sender, plan, c, err := sendingSide(ctx, from, o, req, a)
	if err != nil {
		return err
	}
	defer sender.Close()
	if err := o.betweenTo(ctx, sender, plan, c, key, from.Host, dst); err != nil {
		return err
	}
	return leftOn(from.Host, a.Srcs, plan)
}

// betweenTo goes on with a copy between two remote hosts once its
// sending side on from is started, with plan, and the contents c the
// receiving side is told: it starts the receiving side on dst with the
// same key, resumes with o.Resume, tells the sending side where to
// connect and waits for both.
func (o Options) betweenTo(ctx context.Context, sender *remote.Remote, plan, c proto.Contents, key []byte, from string, dst remote.Target) error {
	host, listen, err := o.streamHost(ctx, dst)
	if err == nil && listen == "" {
		host, err = resolveIP(ctx, host, "resolve "+host) // the sending host connects to it by address
	}
	if err != nil {
		return err
	}
	up := o.request(key)
	up.Dest, up.Contents, up.Listen, up.DataPorts = dst.Path, c, listen, o.DataPorts.String()
	receiver, st, err := begin(ctx, dst, o, remoteReceive, up)
	if err != nil {
		return err
	}
	defer receiver.Close()
	if o.Resume {
		st, err = resumeBetween(ctx, sender, receiver, st, plan.Mode, from, dst.Host)
		if err != nil {
			return err
		}
	}
	if st.Kind != "port" {
		return conn.Errorf(conn.KindSetup, "start the remote side on "+dst.Host, "expected its port, got %q", st.Kind)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(st.N)))
	fmt.Fprintf(notices(o.Verbose, o.Stderr), "rdmacp: the stream goes from %s straight to %s at %s\n", from, dst.Host, addr)
	// A failed write means ssh is gone; the sending side's status says why.
	_ = proto.WriteJSONLine(sender.Stdin, proto.ConnectLine{Connect: addr})
	return finishBetween(ctx, sender, receiver, from, dst.Host, addr)
}

// BetweenTo copies the files and directories at srcs, all on one remote
// host, to each host of hosts (the same DST on each, in its Path) as one
// stream that goes from that host down the chain of hosts, in the order
// given, never through this host. It starts the sending side as Between
// does and the receiving sides, with its plan, as CopyTo does, then tells
// the sending side the first host of the chain that started and the
// hosts after it to go on with should that one die. Its result is
// CopyTo's: a host of the chain that could not connect to the next one
// fails the copy before the stream, naming the pair.
func BetweenTo(ctx context.Context, srcs []remote.Target, hosts []remote.Target, o Options) error {
	from := srcs[0]
	req, a := o.fetchRequest(proto.NewKey(), srcs) // the key is the forward line's
	req.ConnectLater, req.Chain = true, true
	sender, plan, c, err := sendingSide(ctx, from, o, req, a)
	if err != nil {
		return err
	}
	defer sender.Close()
	err = chain.Down(ctx, hosts, o.chainOf(c), func(ctx context.Context, live []*chain.Member) (pipe.Stats, error) {
		return sentDown(ctx, sender, from.Host, live, o)
	})
	if err != nil {
		return err
	}
	return leftOn(from.Host, a.Srcs, plan)
}

// sendingSide starts the sending side of a copy between remote hosts on
// from with req, which asks for a, and checks its plan against a (see
// relayedPlan). It returns the sending side, its plan, and the contents
// the receiving sides are told.
func sendingSide(ctx context.Context, from remote.Target, o Options, req proto.Request, a plan.Asked) (*remote.Remote, proto.Contents, proto.Contents, error) {
	sender, st, err := begin(ctx, from, o, remoteSend, req)
	if err != nil {
		return nil, proto.Contents{}, proto.Contents{}, err
	}
	if st.Kind != "plan" {
		sender.Close()
		return nil, proto.Contents{}, proto.Contents{}, conn.Errorf(conn.KindSetup, "start the remote side on "+from.Host, "expected its plan, got %q", st.Kind)
	}
	c, err := relayedPlan(a, st.Contents)
	if err != nil {
		sender.Close()
		return nil, proto.Contents{}, proto.Contents{}, claimOf(from.Host, err)
	}
	o.noteSingle(c.Mode)
	return sender, st.Contents, c, nil
}

// sentDown tells the sending side on from to send the stream down live,
// the chain of hosts that started, and returns what it says it sent and
// the hosts it says it gave up (no more than the chain has; which they
// are, chain.Down checks). A sending side that could not connect to the
// first host names the pair (see remote.LinkFailed); a host of live that could
// not connect to the next one ends the wait (see chain.Broken).
func sentDown(ctx context.Context, sender *remote.Remote, from string, live []*chain.Member, o Options) (pipe.Stats, error) {
	first := live[0]
	fmt.Fprintf(notices(o.Verbose, o.Stderr), "rdmacp: the stream goes from %s straight down the chain, first to %s at %s\n", from, first.Target.Host, first.Addr)
	// A failed write means ssh is gone; the sending side's status says why.
	_ = proto.WriteJSONLine(sender.Stdin, chain.Forward(live))
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		select {
		case <-chain.Broken(live):
			stop(conn.Errorf(conn.KindSetup, "", "a host of the chain cannot connect to the next one"))
		case <-ctx.Done():
		}
	}()
	var stats pipe.Stats
	for {
		st, err := sender.Next(ctx, proto.MaxTimeout)
		switch {
		case ctx.Err() != nil:
			return stats, context.Cause(ctx)
		case err != nil:
			return stats, conn.Errorf(conn.KindAborted, "the remote side on "+from, "%v", err)
		case st.Kind == "lost" && len(stats.Lost) == len(live):
			return stats, conn.Errorf(conn.KindIntegrity, "after the stream", "the remote side on %s names more lost hosts than the %d of the chain", from, len(live))
		case st.Kind == "lost":
			stats.Lost = append(stats.Lost, st.Msg)
			continue
		case st.Kind == "fail" && remote.KindOfCode(int(st.N)) == conn.KindSetup:
			return stats, remote.LinkFailed(from, first.Target.Host, first.Addr, st)
		case st.Kind != "ok":
			if err := remote.Failure(from, st); err != nil {
				return stats, err
			}
			return stats, conn.Errorf(conn.KindIntegrity, "after the stream", "the remote side on %s reports %s, not what it sent", from, st.Kind)
		}
		stats.Bytes = st.N
		return stats, nil
	}
}

// resumeBetween passes a resume's offers, which the receiving side on to
// makes first (its status st and those after it), on to the sending side
// on from, and for a single file (mode) where the sending side answers
// that the stream starts back to the receiving side; each side checks
// what it is passed as it does from a local side. It returns the
// receiving side's status after its offers.
func resumeBetween(ctx context.Context, sender, receiver *remote.Remote, st proto.Status, mode, from, to string) (proto.Status, error) {
	offers := 0
	for ; st.Kind == "have"; offers++ {
		if mode != proto.ModeTar && offers > 0 {
			return proto.Status{}, conn.Errorf(conn.KindSetup, "resume", "a second offer from the remote side on %s for one file", to)
		}
		// A failed write means ssh is gone; the next status says why.
		_ = proto.WriteJSONLine(sender.Stdin, st.Offer)
		if mode == proto.ModeFile {
			at, err := sender.Next(ctx, proto.OfferWait)
			switch {
			case err != nil:
				return proto.Status{}, conn.Errorf(conn.KindSetup, "resume on "+from, "%v", err)
			case at.Kind == "fail":
				return proto.Status{}, remote.Failure(from, at)
			case at.Kind != "from":
				return proto.Status{}, conn.Errorf(conn.KindSetup, "resume on "+from, "expected where the stream starts, got %q", at.Kind)
			}
			_ = proto.WriteJSONLine(receiver.Stdin, proto.FromLine{From: at.N})
		}
		var err error
		if st, err = receiver.Next(ctx, proto.OfferWait); err != nil {
			return proto.Status{}, conn.Errorf(conn.KindSetup, "resume on "+to, "%v", err)
		}
		if err := remote.Failure(to, st); err != nil {
			return proto.Status{}, err
		}
	}
	switch {
	case mode == proto.ModeFile && offers == 0:
		return proto.Status{}, conn.Errorf(conn.KindSetup, "resume on "+to, "no offer for the file")
	case mode == proto.ModeTar:
		_ = proto.WriteJSONLine(sender.Stdin, proto.Offer{End: true})
	}
	return st, nil
}

// relayedPlan checks the sending side's plan c against what a asked for,
// as a download's (see plan.Asked.Check), and returns the contents the
// receiving side is told: the names checked, whether only files may come
// (no -r), nothing of what only a download's local side reads. A name
// only the sending side knows (a source such as "." or "~") is refused:
// nothing here can tell whether DST is a new name for it.
func relayedPlan(a plan.Asked, c proto.Contents) (proto.Contents, error) {
	names, err := a.Check(c, false)
	if err != nil {
		return proto.Contents{}, err
	}
	c.Names, c.Counts, c.Left, c.Files = names, nil, 0, c.Mode == proto.ModeTar && !a.Recursive
	return c, nil
}

// finishBetween waits for the results of a copy between two remote
// hosts, sender's on from and receiver's on to (listening at addr). A
// sending side that fails before the stream ends the receiving side's
// wait; if it could not connect, the error names the pair.
func finishBetween(ctx context.Context, sender, receiver *remote.Remote, from, to, addr string) error {
	sent, err := sender.Next(ctx, proto.MaxTimeout)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil {
		return conn.Errorf(conn.KindAborted, "the remote side on "+from, "%v", err)
	}
	if sent.Kind == "fail" && remote.KindOfCode(int(sent.N)) == conn.KindSetup {
		return remote.LinkFailed(from, to, addr, sent)
	}
	got, err := receiver.Next(ctx, remote.StatusWait)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil {
		err = conn.Errorf(conn.KindAborted, "after the stream", "the remote side on %s: %v", to, err)
		if sendErr := remote.Failure(from, sent); sendErr != nil {
			return fmt.Errorf("%w; and %v", sendErr, err)
		}
		return err
	}
	return betweenOutcome(sent, got, from, to)
}

// betweenOutcome is the result of a copy between two remote hosts whose
// sending side on from said sent last, and the receiving side on to got:
// both must say they moved the same bytes. When both failed, the
// receiving side's failure comes first and gives the exit code: it is the
// one that knows what was written (a refused DST, a damaged or
// unauthenticated stream), where the sending side mostly sees its end.
func betweenOutcome(sent, got proto.Status, from, to string) error {
	if u, ok := refusedClaim(got); ok {
		return claimOf(from, &proto.Unasked{Claim: u.Claim, Why: u.Why + " (refused on " + to + ")"})
	}
	sendErr, recvErr := remote.Failure(from, sent), remote.Failure(to, got)
	switch {
	case sendErr != nil && recvErr != nil:
		return fmt.Errorf("%w; and %v", recvErr, sendErr)
	case recvErr != nil:
		return recvErr
	case sendErr != nil:
		return sendErr
	case sent.Kind != "ok":
		return conn.Errorf(conn.KindIntegrity, "after the stream", "the remote side on %s reports %s, not what it sent", from, sent.Kind)
	}
	return remote.Done(to, got, sent.N, "sent by "+from)
}

// refusedClaim returns what got, the receiving side's status in a copy
// between two hosts, says it refused of the sending side's archive as not
// asked for (exit 9, with the claim as unasked quotes it), and whether it
// says so.
func refusedClaim(got proto.Status) (*proto.Unasked, bool) {
	if got.Kind != "fail" || got.N != command.ExitUnasked {
		return nil, false
	}
	_, rest, _ := strings.Cut(got.Msg, "not asked for: ")
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return nil, false
	}
	claim, _ := strconv.Unquote(quoted)
	return &proto.Unasked{Claim: claim, Why: strings.TrimPrefix(rest[len(quoted):], ": ")}, true
}
