package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/tree"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// source is one SRC argument: what of it goes into the archive, its
// place among the paths planCopy was given, and what stat said of it.
type source struct {
	tree.Source
	arg  int         // its place among the paths planCopy was given
	Info os.FileInfo // of what path leads to (links on the command line are followed)
}

// Plan is what a copy streams.
type Plan struct {
	Mode string // proto.ModeFile, proto.ModeSparse or proto.ModeTar
	Srcs []source
	// Several says that more than one source was asked for, or came of
	// them (a pattern's matches): the copy is an archive, even of one,
	// and DST a directory.
	Several bool
	Left    []error          // why each source that Several left out was left out
	Resume  *tree.Resumption // in tar mode, what the receiving side has of it, when resuming
	Tally   *tree.Tally      // in tar mode, counts the archive for the progress line; nil: no line
}

// planCopy checks the sources: one regular file is streamed as is (or, if
// it has holes, as a tar archive of one sparse entry); several sources, or
// a directory (only with recursive), as a tar archive. With several (see
// Plan.Several), a source that cannot be copied is left out (p.Left says
// why) unless none can. A source that rules exclude is left out, as no
// failure, and the rest go with rules for their walk.
func planCopy(paths []string, recursive, several bool, rules *filter.Rules) (Plan, error) {
	p := Plan{Several: several || len(paths) > 1}
	for i, path := range paths {
		s, err := planSource(path, recursive)
		switch {
		case err != nil && !p.Several:
			return Plan{}, err
		case err != nil:
			p.Left = append(p.Left, err)
			continue
		case rules.Match(s.Name, s.Info.IsDir()):
			continue
		}
		s.arg, s.Rules = i, rules
		p.Srcs = append(p.Srcs, s)
	}
	if len(p.Srcs) == 0 && len(p.Left) == 0 {
		return Plan{}, command.Usagef("nothing to copy: the filter rules exclude every source")
	}
	if len(p.Srcs) == 0 {
		return Plan{}, &LeftOut{Why: p.Left, none: true}
	}
	p.Mode = proto.ModeTar
	if !p.Several && p.Srcs[0].Info.Mode().IsRegular() {
		p.Mode = tree.SingleMode(p.Srcs[0].Path)
	}
	return p, nil
}

// planSource checks one source of a copy.
func planSource(path string, recursive bool) (source, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return source{}, command.Usagef("%v", err)
	}
	if fi.IsDir() && !recursive {
		return source{}, command.Usagef("%s is a directory: use -r to copy directories", path)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return source{}, command.Usagef("%s: not a regular file or a directory", path)
	}
	name, err := destName(path)
	if err != nil {
		return source{}, err
	}
	return source{Source: tree.Source{Path: path, Name: name}, Info: fi}, nil
}

// LeftOut is the failure of a copy of several sources some of which were
// left out, each for its reason (the others were copied): exit code 1, as
// scp's.
type LeftOut struct {
	Why  []error
	none bool // no source could be copied
}

func (e *LeftOut) Error() string {
	s := make([]string, len(e.Why))
	for i, err := range e.Why {
		s[i] = err.Error()
	}
	if e.none {
		return "nothing copied: " + strings.Join(s, "; ")
	}
	return fmt.Sprintf("not copied (the other sources were): %s", strings.Join(s, "; "))
}

// Open plans the copy of paths (see planCopy) and, in file mode,
// opens the file, the stream's input (nil in tar mode, whose input is
// made while it streams).
func Open(paths []string, recursive, several bool, rules *filter.Rules) (Plan, *os.File, error) {
	p, err := planCopy(paths, recursive, several, rules)
	if err != nil || p.Mode != proto.ModeFile {
		return p, nil, err
	}
	f, err := os.Open(p.Srcs[0].Path)
	if err != nil {
		return p, nil, conn.Errorf(conn.KindSetup, "", "%v", err)
	}
	return p, f, nil
}

// Contents describes what p streams, for the receiving side: a file's
// (in file or sparse mode) name, permission bits, size and version, and
// its times with preserve.
func (p Plan) Contents(preserve bool) proto.Contents {
	if p.Mode == proto.ModeTar {
		c := proto.Contents{Mode: proto.ModeTar, Single: !p.Several}
		for _, s := range p.Srcs {
			c.Names = append(c.Names, s.Name)
		}
		return c
	}
	fi := p.Srcs[0].Info
	c := proto.Contents{Mode: p.Mode, Name: p.Srcs[0].Name, Perm: meta.UnixMode(fi.Mode()), Size: fi.Size(), Changed: fi.ModTime().UnixNano()}
	if preserve {
		c.MTime = fi.ModTime().UnixNano()
		c.ATime = accessTime(fi).UnixNano()
	}
	return c
}

// destName is the name a source gets at the destination: its base name
// (that of the absolute path for "." and the like).
func destName(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", command.Usagef("%s: %v", path, err)
	}
	name := filepath.Base(abs)
	if proto.CheckName(name) != nil {
		return "", command.Usagef("%s: cannot copy the root directory; copy what is in it", path)
	}
	return name, nil
}

// Sources are what of p's sources goes into its archive.
func (p Plan) Sources() []tree.Source {
	srcs := make([]tree.Source, len(p.Srcs))
	for i, s := range p.Srcs {
		srcs[i] = s.Source
	}
	return srcs
}

// LeftErr returns the failure of a copy of p for the sources it left
// out, nil if none.
func (p Plan) LeftErr() error {
	if len(p.Left) == 0 {
		return nil
	}
	return &LeftOut{Why: p.Left}
}

// Describe names the sources for messages.
func (p Plan) Describe() string {
	if len(p.Srcs) == 1 {
		return p.Srcs[0].Path
	}
	return fmt.Sprintf("%d sources", len(p.Srcs))
}
