package sendrecv

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// template is an --output name: in its file name, %n stands for the
// stream's number (from 1), %t for the time its output was opened (UTC,
// as 20261127T201045Z) and %% for a %.
type template struct {
	dir, base string
}

// parseTemplate checks an --output template: its expansions only in the
// file name, of a directory that exists, and with keep a %n, so that no
// two streams are given one name.
func parseTemplate(s string, keep bool) (template, error) {
	dir, base := filepath.Split(s)
	if strings.Contains(dir, "%") {
		return template{}, command.Usagef("--output %q: %% expansions go in the file name, not in its directory", s)
	}
	if base == "" {
		return template{}, command.Usagef("--output %q: give a file name (a directory takes no stream)", s)
	}
	numbered := false
	for i := 0; i < len(base); i++ {
		if base[i] != '%' {
			continue
		}
		if i++; i == len(base) || !strings.ContainsRune("nt%", rune(base[i])) {
			return template{}, command.Usagef("--output %q: %% must be followed by n (the stream's number), t (its time) or %%", s)
		}
		numbered = numbered || base[i] == 'n'
	}
	if keep && !numbered {
		return template{}, command.Usagef("--output %q with -k needs %%n (the stream's number) in the name, so that no two streams are given one", s)
	}
	if dir == "" {
		dir = "."
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return template{}, command.Usagef("--output %q: %s is not a directory", s, dir)
	}
	t := template{dir: dir, base: base}
	if !strings.Contains(base, "%") {
		if _, err := os.Lstat(t.path(0, time.Time{})); err == nil {
			return template{}, command.Usagef("--output %q exists: rdmarecv never overwrites an --output file", s)
		}
	}
	return t, nil
}

// name is the file name of stream n, whose output was opened at.
func (t template) name(n int64, at time.Time) string {
	r := strings.NewReplacer("%n", strconv.FormatInt(n, 10), "%t", at.UTC().Format("20060102T150405Z"), "%%", "%")
	return r.Replace(t.base)
}

// path is where stream n lands.
func (t template) path(n int64, at time.Time) string {
	return filepath.Join(t.dir, t.name(n, at))
}

// landing is a stream on its way to its --output file: written to a
// part file beside it, linked to its name once whole and verified.
type landing struct {
	f      *os.File
	part   string // the part file's path
	final  string
	sync   bool // --sync: fsync the file and its directory first
	linked bool
	log    io.Writer
}

// openLanding opens stream st's --output file, or fails the stream if
// its name exists. The errors name the file, never its directory: the
// sender is told them.
func openLanding(t template, st server.Stream, sync bool, log io.Writer) (*server.Output, error) {
	name := t.name(st.N, st.Began)
	final := filepath.Join(t.dir, name)
	if _, err := os.Lstat(final); err == nil {
		return nil, conn.Errorf(conn.KindAborted, "open the output", "%q exists: the receiver never overwrites a file", name)
	}
	l := &landing{final: final, sync: sync, log: log}
	var err error
	for range 100 {
		l.part = filepath.Join(t.dir, "."+name+".part-"+strconv.FormatUint(rand.Uint64(), 36))
		l.f, err = os.OpenFile(l.part, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, conn.Errorf(conn.KindAborted, "open the output", "create a part file for %q: %v", name, errors.Unwrap(err))
	}
	return &server.Output{W: l.f, Commit: l.commit, End: l.end}, nil
}

// commit gives the whole, verified stream its name; the link fails if
// the name has been taken meanwhile.
func (l *landing) commit() error {
	name := filepath.Base(l.final)
	if l.sync {
		if err := l.f.Sync(); err != nil {
			return conn.Errorf(conn.KindAborted, "sync the output", "%q: %v", name, err)
		}
	}
	if err := l.f.Close(); err != nil {
		return conn.Errorf(conn.KindAborted, "close the output", "%q: %v", name, err)
	}
	if err := os.Link(l.part, l.final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return conn.Errorf(conn.KindAborted, "name the output", "%q exists: the receiver never overwrites a file", name)
		}
		return conn.Errorf(conn.KindAborted, "name the output", "%q: %v", name, errors.Unwrap(err))
	}
	l.linked = true
	l.removePart()
	if l.sync {
		if err := syncDir(filepath.Dir(l.final)); err != nil {
			return conn.Errorf(conn.KindAborted, "sync the output's directory", "%q: %v", name, err)
		}
	}
	return nil
}

// end removes the part file of a stream that failed before its commit.
// A committed stream is whole in its file, whatever failed after (the
// sender gone before it was told): it keeps its name, and counts as
// landed.
func (l *landing) end(err error) error {
	l.f.Close()
	if l.linked {
		return nil
	}
	l.removePart()
	return err
}

// removePart removes the part file's name.
func (l *landing) removePart() {
	if err := os.Remove(l.part); err != nil {
		fmt.Fprintf(l.log, "rdmarecv: warning: %v\n", err)
	}
}

// syncDir fsyncs the directory dir, so that a name linked in it stays.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
