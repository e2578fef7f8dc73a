package plan

import (
	"fmt"
	"path"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
)

// A download writes only what was asked for (the class of scp's
// CVE-2019-6111): the local side checks the remote side's plan against the
// sources as the user wrote them before it prepares anything, and the
// extraction checks every archive entry against the names the plan was
// checked for.

// Asked is what a download asks the remote side for: its sources, as the
// user wrote them, and whether directories may come (-r).
type Asked struct {
	Srcs      []string
	Recursive bool
}

// AskedName returns the name a source, as the user wrote it, has at the
// destination: its base name; "" where only the remote side knows it (".",
// "..", "~", "/" and paths that end in them).
func AskedName(src string) string {
	c := path.Clean(src)
	b := path.Base(c)
	if c == "~" || b == "." || b == ".." || b == "/" {
		return ""
	}
	return b
}

// Check checks the remote side's plan c against what a asked for: one
// regular file, asked for alone (or a lone pattern's one match), under
// its own name (or, if it has holes, as an archive of that one file); an
// archive only with -r, several sources or a pattern, whose top-level
// names are, in order, those each source gave (c.Counts; one each if
// nil): its name, or for a pattern, names the pattern takes (see takes),
// or none for a source left out. A name only the remote side knows (see
// AskedName) is taken only when newName says that DST itself is the name
// it gets here (a single source to a new name). It returns the names, as
// the archive has them, that the extraction takes.
func (a Asked) Check(c proto.Contents, newName bool) ([]string, error) {
	if c.Mode == proto.ModeFile || c.Mode == proto.ModeSparse {
		return nil, a.checkFile(c)
	}
	archive := "an archive of " + strings.Join(c.Names, ", ")
	single := len(a.Srcs) == 1 && (c.Single || !isPattern(a.Srcs[0]))
	switch {
	case single && !a.Recursive:
		return nil, &proto.Unasked{Claim: archive, Why: fmt.Sprintf("%s was asked for without -r: a file, not an archive", a.Srcs[0])}
	case c.Single != single:
		return nil, &proto.Unasked{Claim: archive, Why: fmt.Sprintf("%d sources were asked for", len(a.Srcs))}
	case c.Single && len(c.Names) != 1:
		return nil, &proto.Unasked{Claim: archive, Why: fmt.Sprintf("%d names for one top-level entry", len(c.Names))}
	}
	counts, err := a.counts(c)
	if err != nil {
		return nil, err
	}
	i := 0
	for k, src := range a.Srcs {
		for _, name := range c.Names[i : i+counts[k]] {
			if err := a.checkName(src, name, newName); err != nil {
				return nil, err
			}
		}
		i += counts[k]
	}
	return c.Names, nil
}

// counts returns how many of c.Names each source gave: c.Counts, which
// must add up to them and give a source that is not a pattern at most
// one, or one each.
func (a Asked) counts(c proto.Contents) ([]int, error) {
	archive := "an archive of " + strings.Join(c.Names, ", ")
	if c.Counts == nil && len(c.Names) == len(a.Srcs) {
		counts := make([]int, len(a.Srcs))
		for i := range counts {
			counts[i] = 1
		}
		return counts, nil
	}
	if len(c.Counts) != len(a.Srcs) {
		return nil, &proto.Unasked{Claim: archive, Why: fmt.Sprintf("%d sources were asked for", len(a.Srcs))}
	}
	sum := 0
	for k, n := range c.Counts {
		if n < 0 || n > 1 && !isPattern(a.Srcs[k]) || n > len(c.Names)-sum {
			return nil, &proto.Unasked{Claim: archive, Why: fmt.Sprintf("%d names for %s", n, a.Srcs[k])}
		}
		sum += n
	}
	if sum != len(c.Names) {
		return nil, &proto.Unasked{Claim: archive, Why: fmt.Sprintf("%d names counted for the sources", sum)}
	}
	return c.Counts, nil
}

// checkName checks name, a top-level name of the archive that src gave.
func (a Asked) checkName(src, name string, newName bool) error {
	if isPattern(src) {
		if !takes(path.Base(src), name) {
			return &proto.Unasked{Claim: name, Why: fmt.Sprintf("neither a name that %s matches nor that pattern itself", src)}
		}
		return nil
	}
	want := AskedName(src)
	switch {
	case want == "" && !newName:
		return &proto.Unasked{Claim: name, Why: fmt.Sprintf("%s names no name here; name the copy (rdmacp -r HOST:%s NEWNAME) or its path", src, src)}
	case want != "" && name != want:
		return &proto.Unasked{Claim: name, Why: fmt.Sprintf("%s was asked for", src)}
	}
	return nil
}

// checkFile checks a plan for one regular file, which only a single
// source gives: under its name, or for a pattern, a name it takes.
func (a Asked) checkFile(c proto.Contents) error {
	if len(a.Srcs) != 1 {
		return &proto.Unasked{Claim: c.Name, Why: fmt.Sprintf("one file, where %d sources were asked for", len(a.Srcs))}
	}
	if isPattern(a.Srcs[0]) {
		return a.checkName(a.Srcs[0], c.Name, false)
	}
	if c.Name != AskedName(a.Srcs[0]) {
		return &proto.Unasked{Claim: c.Name, Why: fmt.Sprintf("%s was asked for", a.Srcs[0])}
	}
	return nil
}
