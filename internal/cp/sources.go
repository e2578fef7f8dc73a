package cp

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// source is one SRC argument.
type source struct {
	path string      // as given
	name string      // its name at the destination (base name)
	info os.FileInfo // of what path leads to (links on the command line are followed)
}

// plan is what a copy streams.
type plan struct {
	mode string // modeFile, modeSparse or modeTar
	srcs []source
	rs   *resumption // in tar mode, what the receiving side has of it, when resuming
}

// planCopy checks the sources: one regular file is streamed as is (or, if
// it has holes, as a tar archive of one sparse entry); several sources, or
// a directory (only with recursive), as a tar archive.
func planCopy(paths []string, recursive bool) (plan, error) {
	var p plan
	for _, path := range paths {
		fi, err := os.Stat(path)
		if err != nil {
			return plan{}, command.Usagef("%v", err)
		}
		if fi.IsDir() && !recursive {
			return plan{}, command.Usagef("%s is a directory: use -r to copy directories", path)
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return plan{}, command.Usagef("%s: not a regular file or a directory", path)
		}
		name, err := destName(path)
		if err != nil {
			return plan{}, err
		}
		p.srcs = append(p.srcs, source{path: path, name: name, info: fi})
	}
	p.mode = modeTar
	if len(p.srcs) == 1 && p.srcs[0].info.Mode().IsRegular() {
		p.mode = singleMode(p.srcs[0].path)
	}
	return p, nil
}

// openSources plans the copy of paths (see planCopy) and, in file mode,
// opens the file, the stream's input (nil in tar mode, whose input is
// made while it streams).
func openSources(paths []string, recursive bool) (plan, *os.File, error) {
	p, err := planCopy(paths, recursive)
	if err != nil || p.mode != modeFile {
		return p, nil, err
	}
	f, err := os.Open(p.srcs[0].path)
	if err != nil {
		return p, nil, conn.Errorf(conn.KindSetup, "", "%v", err)
	}
	return p, f, nil
}

// contents describes what p streams, for the receiving side: a file's
// (in file or sparse mode) name, permission bits, size and version, and
// its times with preserve.
func (p plan) contents(preserve bool) Contents {
	if p.mode == modeTar {
		c := Contents{Mode: modeTar, Single: len(p.srcs) == 1}
		for _, s := range p.srcs {
			c.Names = append(c.Names, s.name)
		}
		return c
	}
	fi := p.srcs[0].info
	c := Contents{Mode: p.mode, Name: p.srcs[0].name, Perm: unixPerm(fi.Mode()), Size: fi.Size(), Changed: fi.ModTime().UnixNano()}
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
	if checkName(name) != nil {
		return "", command.Usagef("%s: cannot copy the root directory; copy what is in it", path)
	}
	return name, nil
}

// describe names the sources for messages.
func (p plan) describe() string {
	if len(p.srcs) == 1 {
		return p.srcs[0].path
	}
	return fmt.Sprintf("%d sources", len(p.srcs))
}
