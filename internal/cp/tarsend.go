package cp

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"
)

// writeTar writes the sources to w as a tar archive (PAX, with
// nanosecond times): each under its destination name, directories with
// everything in them. Files with holes are stored as sparse entries,
// without their holes (see writeSparseEntry). Symbolic links inside
// directories are stored as links; sockets, pipes and devices are skipped
// with a warning on warn.
func writeTar(w io.Writer, srcs []source, warn io.Writer) error {
	a := archiver{w: w, tw: tar.NewWriter(w), warn: warn, buf: make([]byte, copyBuf)}
	for _, s := range srcs {
		root, err := filepath.EvalSymlinks(s.path)
		if err != nil {
			return err
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			return a.add(p, path.Join(s.name, filepath.ToSlash(rel)))
		})
		if err != nil {
			return err
		}
	}
	return a.tw.Close()
}

// archiver writes an archive to w: through tw, but sparse entries, which
// tw cannot write, straight to w.
type archiver struct {
	w    io.Writer
	tw   *tar.Writer
	warn io.Writer
	buf  []byte // for copying sparse entries' data
}

// add adds the file at p to the archive under name.
func (a archiver) add(p, name string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	var link string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	case !fi.IsDir() && !fi.Mode().IsRegular():
		fmt.Fprintf(a.warn, "rdmacp: %s: skipped (%v, not a file, directory or link)\n", p, fi.Mode().Type())
		return nil
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	h.Name, h.Format = name, tar.FormatPAX
	h.Uname, h.Gname, h.ChangeTime = "", "", time.Time{}
	if fi.IsDir() {
		h.Name += "/"
	}
	if !fi.Mode().IsRegular() {
		if err := a.tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	segs, err := dataSegments(f, h.Size)
	if err != nil {
		return err
	}
	if dataLen(segs) < h.Size {
		// The previous entry's padding first: w must be at a block boundary.
		if err := a.tw.Flush(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := writeSparseEntry(a.w, h, f, segs, a.buf); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	}
	if err := a.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if _, err := io.Copy(a.tw, f); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}
