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
// everything in them. Symbolic links inside directories are stored as
// links; sockets, pipes and devices are skipped with a warning on warn.
func writeTar(w io.Writer, srcs []source, warn io.Writer) error {
	tw := tar.NewWriter(w)
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
			return addEntry(tw, p, path.Join(s.name, filepath.ToSlash(rel)), warn)
		})
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// addEntry adds the file at p to tw under name.
func addEntry(tw *tar.Writer, p, name string, warn io.Writer) error {
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
		fmt.Fprintf(warn, "rdmacp: %s: skipped (%v, not a file, directory or link)\n", p, fi.Mode().Type())
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
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}
