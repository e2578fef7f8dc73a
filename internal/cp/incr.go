package cp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/cp/plan"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/quick"
	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
	"github.com/rdmapipe/rdmapipe/internal/cp/tree"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// An incremental copy (-a, -u, -c, --size-only, --ignore-existing,
// --delete, --delete-excluded, -n, --itemize-changes) of a tree: the receiving side lists
// what it has under DST of the archive's top-level entries, the sending
// side lists its sources, and the local side compares the two (see
// quick.Compare). In an upload the remote side's listing comes as "entry"
// lines up to "listed" before its port, and the local side answers with
// the entries to remove (decision lines); in a download the remote side
// lists its sources after its plan, and the local side removes what it
// has to and answers with the files not to send. Only what differs
// travels.

// incremental is what the flags of an incremental copy ask for.
type incremental struct {
	on       bool // compare with the destination (any of the flags)
	explicit bool // a flag but -a: one that a copy of one file or between hosts cannot do
	rules    quick.Rules
	dryRun   bool
	itemize  bool
	excluded bool      // --delete-excluded: what the filter rules leave out is deleted too
	out      io.Writer // where the changes are listed
}

// incrementalOf returns what c's flags ask of an incremental copy, and
// sets o's recursion and preservation for -a.
func incrementalOf(c *cli.Context, o *Options, out io.Writer) error {
	in := incremental{dryRun: c.Bool("dry-run"), itemize: c.Bool("itemize-changes"), excluded: c.Bool("delete-excluded"), out: out}
	in.rules = quick.Rules{Checksum: c.Bool("checksum"), SizeOnly: c.Bool("size-only"), Update: c.Bool("update"),
		IgnoreExisting: c.Bool("ignore-existing"), Delete: c.Bool("delete") || in.excluded}
	r := in.rules
	in.explicit = in.dryRun || in.itemize || r.Checksum || r.SizeOnly || r.Update || r.IgnoreExisting || r.Delete
	in.on = in.explicit || c.Bool("archive")
	if in.rules.Checksum && in.rules.SizeOnly {
		return command.Usagef("--checksum and --size-only do not go together")
	}
	if in.on && o.Resume {
		return command.Usagef("--resume does not go with -a, -u, -c, --size-only, --ignore-existing, --delete, --delete-excluded, -n or --itemize-changes (each file that differs travels whole)")
	}
	if c.Bool("archive") {
		o.Recursive, o.Preserve = true, true
		o.Keep.Owner, o.Keep.Group, o.Keep.Devices = true, true, true
	}
	o.Incr = in
	return nil
}

// hostsOnly checks, for a copy between hosts or to several, that only -a
// of an incremental copy's flags is given, and leaves it a plain copy.
func (o *Options) hostsOnly() error {
	if o.Incr.explicit {
		return command.Usagef("-u, -c, --size-only, --ignore-existing, --delete, --delete-excluded, -n and --itemize-changes go with an upload or a download, not a copy between hosts or to several (-a does: as -r -p)")
	}
	o.Incr.on = false
	return nil
}

// treeOnly checks that a copy in mode (its plan's) is a tree when a flag
// asks to compare it: one file travels whole (-a alone allows it).
func (in incremental) treeOnly(mode string) error {
	if in.explicit && mode != proto.ModeTar {
		return command.Usagef("-u, -c, --size-only, --ignore-existing, --delete, --delete-excluded, -n and --itemize-changes compare trees: a single file travels whole (copy its directory, or use -C to resume it)")
	}
	return nil
}

// compares says whether a copy in mode compares with the destination.
func (in incremental) compares(mode string) bool { return in.on && mode == proto.ModeTar }

// entryTop is where a listing's top-level entry is, its name there, and
// what of it the copy leaves out (nil: nothing).
type entryTop struct {
	path, name string
	leave      func(string, bool) bool
}

// listTrees lists the trees at tops (see quick.Walk) as how says, each
// with what its top leaves out, into a checked listing, handing each
// entry to each (if not nil) as it is listed.
func listTrees(tops []entryTop, how quick.How, each func(quick.Entry) error) (*quick.Listing, error) {
	var names []string
	for _, t := range tops {
		names = append(names, t.name)
	}
	l := quick.NewListing(names)
	for _, t := range tops {
		how.Leave = t.leave
		err := quick.Walk(t.path, t.name, how, func(e quick.Entry) error {
			add := l.Put // under the top, which Add checked
			if e.Name == t.name {
				add = l.Add
			}
			if err := add(e); err != nil {
				return fmt.Errorf("list %s: %w", t.path, err)
			}
			if each == nil {
				return nil
			}
			return each(e)
		})
		if err != nil {
			return nil, err
		}
	}
	return l, nil
}

// background is a listing made on a goroutine of its own, beside the
// remote side's.
type background struct {
	done chan struct{}
	l    *quick.Listing
	err  error
}

// listBeside starts listing the trees at tops (see listTrees).
func listBeside(tops []entryTop, how quick.How) *background {
	b := &background{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.l, b.err = listTrees(tops, how, nil)
	}()
	return b
}

// howOf is how a side that receives if receiving lists the trees of a
// copy that compares hashes if hash and keeps what keep says: with the
// marks of what it keeps besides data, mode and times (see meta.Marker).
func howOf(hash bool, keep meta.Flags, receiving bool) quick.How {
	how := quick.How{Hash: hash}
	m := meta.NewMarker(keep, receiving, os.Geteuid() == 0)
	if m.Lists() {
		how.Marks = func(dirfd int, base, p string, st *unix.Stat_t) (quick.Marks, error) {
			k, err := m.Marks(dirfd, base, p, st)
			return quick.Marks(k), err
		}
	}
	return how
}

// wait returns the listing once it is made.
func (b *background) wait() (*quick.Listing, error) {
	<-b.done
	return b.l, b.err
}

// sourceTops are where p's sources are (links on the command line
// followed, as the archive's walk does), their names, and what their
// filter rules leave out.
func sourceTops(p plan.Plan) ([]entryTop, error) {
	var tops []entryTop
	for _, s := range p.Srcs {
		root, err := filepath.EvalSymlinks(s.Path)
		if err != nil {
			return nil, err
		}
		tops = append(tops, entryTop{root, s.Name, s.Rules.Match})
	}
	return tops, nil
}

// destTops are where the destination of s has the archive's top-level
// entries, and their names in the archive.
func destTops(s *tree.TarSink) []entryTop {
	var tops []entryTop
	for _, n := range s.Names() {
		tops = append(tops, entryTop{path: filepath.Join(s.Dir(), s.LocalName(n)), name: n})
	}
	return tops
}

// linesBuf is the buffer of a listing's or decisions' lines: written one
// by one, each line would cost the ssh channel a packet of its own.
const linesBuf = 64 << 10

// listingWriter writes a listing as status lines, "entry TEXT" each (see
// quick.Entry.AppendText), as its entries come, then "listed N".
type listingWriter struct {
	bw   *bufio.Writer
	line []byte
	n    int
	err  error // the first failed write
}

func newListingWriter(w io.Writer) *listingWriter {
	return &listingWriter{bw: bufio.NewWriterSize(w, linesBuf)}
}

// entry writes e's line.
func (lw *listingWriter) entry(e quick.Entry) error {
	lw.line = append(e.AppendText(append(lw.line[:0], proto.StatusPrefix+"entry "...)), '\n')
	if _, err := lw.bw.Write(lw.line); err != nil {
		lw.err = err
		return err
	}
	lw.n++
	return nil
}

// end writes "listed N" and what is buffered.
func (lw *listingWriter) end() error {
	fmt.Fprintf(lw.bw, "%slisted %d\n", proto.StatusPrefix, lw.n)
	return lw.bw.Flush()
}

// writeDecisions writes a decision line for each of del (entries to
// remove) and of skip (files and links not to send), "delete NAME" and
// "skip NAME" with NAME quoted as a Go string, then "end". bw keeps the
// first failed write, which Flush returns.
func writeDecisions(w io.Writer, del []string, skip map[string]bool) error {
	bw := bufio.NewWriterSize(w, linesBuf)
	var line []byte
	for _, n := range del {
		line = append(strconv.AppendQuote(append(line[:0], "delete "...), n), '\n')
		bw.Write(line)
	}
	for n := range skip {
		line = append(strconv.AppendQuote(append(line[:0], "skip "...), n), '\n')
		bw.Write(line)
	}
	bw.WriteString("end\n")
	return bw.Flush()
}

// parseDecision parses a decision line: what it asks (delete, skip or
// end) and the entry it names.
func parseDecision(line string) (what, name string, err error) {
	what, q, _ := strings.Cut(line, " ")
	switch {
	case what == "end" && line == what:
		return what, "", nil
	case what != "delete" && what != "skip":
		return "", "", fmt.Errorf("decision %.64q: not delete, skip or end", line)
	}
	if name, err = strconv.Unquote(q); err != nil {
		return "", "", fmt.Errorf("decision %.64q: its name not quoted", line)
	}
	return what, name, nil
}

// readListing reads the remote side's listing from r, whose first status
// line st is, into a listing of entries under tops; what breaks its
// bounds or names what is not under tops is refused.
func readListing(ctx context.Context, r *remote.Remote, st proto.Status, tops []string, host string) (*quick.Listing, error) {
	l := quick.NewListing(tops)
	for st.Kind == "entry" {
		if err := l.Add(st.Entry); err != nil {
			return nil, &proto.Unasked{Claim: st.Entry.Name, Why: fmt.Sprintf("the listing from %s: %v", host, err)}
		}
		var err error
		if st, err = r.Next(ctx, proto.OfferWait); err != nil {
			return nil, conn.Errorf(conn.KindSetup, "list on "+host, "%v", err)
		}
	}
	if err := remote.Failure(host, st); err != nil {
		return nil, err
	}
	if st.Kind != "listed" || st.N != int64(l.Len()) {
		return nil, conn.Errorf(conn.KindSetup, "list on "+host, "expected the end of its listing, got %q %d after %d entries", st.Kind, st.N, l.Len())
	}
	return l, nil
}

// compare compares src with dst and lists the changes on in.out: with
// --itemize-changes rsync's items, else, with -n, the names. What the
// filter rules exclude is deleted only with --delete-excluded.
func (in incremental) compare(src, dst *quick.Listing, sending, preserve, specials bool, rules *filter.Rules) quick.Plan {
	r := in.rules
	r.Sending, r.Perms, r.Times, r.Specials = sending, preserve, preserve, specials
	if rules != nil && !in.excluded {
		r.Protect = rules.Match
	}
	p := quick.Compare(src, dst, r)
	for _, item := range p.Items {
		switch {
		case in.itemize:
			fmt.Fprintln(in.out, item)
		case in.dryRun && strings.HasPrefix(item, "*deleting"):
			fmt.Fprintln(in.out, "deleting "+item[12:])
		case in.dryRun:
			fmt.Fprintln(in.out, item[12:])
		}
	}
	return p
}

// listSourcesBeside starts listing p's sources (see listBeside), for an
// upload's comparison.
func (o Options) listSourcesBeside(p plan.Plan) (*background, error) {
	tops, err := sourceTops(p)
	if err != nil {
		return nil, conn.Errorf(conn.KindSetup, "list the sources", "%v", err)
	}
	return listBeside(tops, howOf(o.Incr.rules.Checksum, o.Keep, false)), nil
}

// listUpload is an upload's comparison on the local side, from st, the
// remote side's first status line: it reads the destination's listing,
// compares it with srcs, the listing of p's sources, tells the remote side
// what to remove and marks in p what not to send. It returns the status
// line after the listing.
func (o Options) listUpload(ctx context.Context, r *remote.Remote, p *plan.Plan, srcs *background, st proto.Status, host string) (proto.Status, error) {
	dst, err := readListing(ctx, r, st, p.Contents(false).Names, host)
	if err != nil {
		return proto.Status{}, err
	}
	src, err := srcs.wait()
	if err != nil {
		return proto.Status{}, conn.Errorf(conn.KindSetup, "list the sources", "%v", err)
	}
	plan := o.Incr.compare(src, dst, true, o.Preserve, o.Keep.Devices, o.Filter)
	if o.Keep.Links {
		quick.SendLinked(src, plan.Skip)
	}
	if !o.Incr.dryRun {
		// A failed write means ssh is gone; the next status says why.
		_ = writeDecisions(r.Stdin, plan.Delete, nil)
	}
	for i := range p.Srcs {
		p.Srcs[i].Skip = plan.Skip
	}
	return r.Next(ctx, portWait)
}

// listDest is an upload's listing on the remote side: it lists what s,
// the destination, has of the archive (with hashes if req asks), and,
// unless a dry run, removes what the local side's answer on br says.
func listDest(s *tree.TarSink, req proto.Request, br *bufio.Reader, stdout, stderr io.Writer) error {
	keep, _ := meta.Parse(req.Keep) // validated
	have, err := writeTrees(destTops(s), howOf(req.Checksum, keep, true), stdout, "list the destination")
	if err != nil || req.DryRun {
		return err
	}
	root, err := quick.OpenRoot(s.Dir())
	if err != nil {
		return conn.Errorf(conn.KindSetup, "delete", "%v", err)
	}
	defer root.Close()
	return readDecisions(br, have, func(what, name string) error {
		if what != "delete" {
			return fmt.Errorf("a file not to send, in an upload")
		}
		if err := root.Remove(s.LocalName(name)); err != nil {
			fmt.Fprintf(stderr, "rdmacp: %v\n", err)
		}
		return nil
	})
}

// writeTrees lists the trees at tops (see listTrees) onto w as they are
// listed, and returns the listing; op names it in errors.
func writeTrees(tops []entryTop, how quick.How, w io.Writer, op string) (*quick.Listing, error) {
	lw := newListingWriter(w)
	have, err := listTrees(tops, how, lw.entry)
	switch {
	case lw.err != nil:
		return nil, conn.Errorf(conn.KindAborted, op, "%v", lw.err)
	case err != nil:
		lw.bw.Flush() // whole lines, before the failure's
		return nil, conn.Errorf(conn.KindSetup, op, "%v", err)
	}
	if err := lw.end(); err != nil {
		return nil, conn.Errorf(conn.KindAborted, op, "%v", err)
	}
	return have, nil
}

// readDecisions reads the local side's decision lines from br up to
// their end, each naming an entry of have, and hands each (what it asks,
// and the name) to do.
func readDecisions(br *bufio.Reader, have *quick.Listing, do func(what, name string) error) error {
	err := within(proto.OfferWait, func() error {
		for n := 0; ; n++ {
			line, err := proto.ReadLine(br, proto.MaxRequestLine)
			if err != nil {
				return err
			}
			what, name, err := parseDecision(string(line))
			switch {
			case err != nil:
				return err
			case what == "end":
				return nil
			}
			if _, ok := have.Get(name); !ok || n == have.Len() {
				return fmt.Errorf("%.64q: not an entry of the listing, or more decisions than entries", name)
			}
			if err := do(what, name); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return conn.Errorf(conn.KindSetup, "read the decisions", "%v", err)
	}
	return nil
}

// listSources is a download's listing on the remote side: it lists p's
// sources (with hashes if req asks) and, unless a dry run, marks in p the
// files that the local side's answer on br says not to send.
func listSources(p *plan.Plan, req proto.Request, br *bufio.Reader, stdout io.Writer) error {
	tops, err := sourceTops(*p)
	if err != nil {
		return conn.Errorf(conn.KindSetup, "list the sources", "%v", err)
	}
	keep, _ := meta.Parse(req.Keep) // validated
	have, err := writeTrees(tops, howOf(req.Checksum, keep, false), stdout, "list the sources")
	if err != nil || req.DryRun {
		return err
	}
	skip := map[string]bool{}
	for i := range p.Srcs {
		p.Srcs[i].Skip = skip
	}
	err = readDecisions(br, have, func(what, name string) error {
		if what != "skip" {
			return fmt.Errorf("an entry to delete, in a download")
		}
		skip[name] = true
		return nil
	})
	if keep.Links {
		quick.SendLinked(have, skip)
	}
	return err
}

// listDownload is a download's comparison on the local side, from st,
// the remote side's status line after its plan: it reads the sources'
// listing (only entries under the names the plan was checked for),
// compares it with dsts, the listing of what s, the destination, has of
// them, removes what --delete says from s (never through a link) and
// tells the remote side what not to send.
func (o Options) listDownload(ctx context.Context, r *remote.Remote, s *tree.TarSink, dsts *background, st proto.Status, host string) error {
	src, err := readListing(ctx, r, st, s.Names(), host)
	if err != nil {
		return err
	}
	dst, err := dsts.wait()
	if err != nil {
		return conn.Errorf(conn.KindSetup, "list the destination", "%v", err)
	}
	plan := o.Incr.compare(src, dst, false, o.Preserve, o.Keep.Devices, o.Filter)
	if o.Incr.dryRun {
		return nil
	}
	if len(plan.Delete) > 0 {
		root, err := quick.OpenRoot(s.Dir())
		if err != nil {
			return conn.Errorf(conn.KindSetup, "delete", "%v", err)
		}
		defer root.Close()
		for _, n := range plan.Delete {
			if err := root.Remove(s.LocalName(n)); err != nil {
				fmt.Fprintf(o.Stderr, "rdmacp: %v\n", err)
			}
		}
	}
	// A failed write means ssh is gone; the remote side's status says why.
	_ = writeDecisions(r.Stdin, nil, plan.Skip)
	return nil
}

// fetchListing is a download's comparison (see listDownload) on the
// local side, after the plan, with the destination listed meanwhile; a
// dry run ends with the remote side's "ok 0".
func (o Options) fetchListing(ctx context.Context, r *remote.Remote, s *tree.TarSink, host string) error {
	dsts := listBeside(destTops(s), howOf(o.Incr.rules.Checksum, o.Keep, true))
	defer dsts.wait()
	st, err := r.Next(ctx, proto.OfferWait)
	if err != nil {
		return conn.Errorf(conn.KindSetup, "list on "+host, "%v", err)
	}
	if err := o.listDownload(ctx, r, s, dsts, st, host); err != nil || !o.Incr.dryRun {
		return err
	}
	if st, err = r.Next(ctx, remote.StatusWait); err != nil {
		return conn.Errorf(conn.KindAborted, "after the listing", "%v", err)
	}
	return remote.Done(host, st, 0, "received")
}
