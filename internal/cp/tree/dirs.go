package tree

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// dirs keeps open the directories an extraction writes into, so that an
// entry is made with calls relative to its own directory, one name to
// look up each, instead of walking its path from the root every time.
// An open directory also stays the one that was checked (see
// checkParents), whatever is renamed on its way afterwards.
type dirs struct {
	root *os.Root
	open map[string]*dir
	made map[string]bool // directories this extraction made
}

// dir is an open directory of an extraction.
type dir struct {
	root *os.Root
	// fresh says that this extraction made the directory: it is mode 0700
	// until the extraction ends, and nothing is in it but what the archive
	// put there.
	fresh bool
	// fd is the directory's descriptor, for writers, if fresh (else -1);
	// file holds it open.
	fd   int
	file *os.File
	// plain says that a file made in the directory gets the mode it is
	// made with less the umask: the directory is fresh and has no default
	// ACL (which would stand for the umask).
	plain bool
	// uid and gid are the owner and group a file made in the directory
	// gets, if fresh: this process's, or the directory's group if it is
	// setgid.
	uid, gid int
	// partials lists the partial files in the directory when it was first
	// needed, by the name of the file they are partial copies of (nil
	// until then).
	partials map[string][]string
}

// maxOpenDirs bounds the directories an extraction keeps open at once.
const maxOpenDirs = 64

func newDirs(root *os.Root) *dirs {
	return &dirs{root: root, open: map[string]*dir{}, made: map[string]bool{}}
}

// of returns the open directory name, a directory under the root that
// checkParents found real, opening it (and those above it) if needed.
func (ds *dirs) of(name string) (*dir, error) {
	if d, ok := ds.open[name]; ok {
		return d, nil
	}
	if len(ds.open) >= maxOpenDirs {
		ds.close()
	}
	d := &dir{root: ds.root, fd: -1}
	if name != "." {
		up, err := ds.of(filepath.Dir(name))
		if err != nil {
			return nil, err
		}
		if d.root, err = up.root.OpenRoot(filepath.Base(name)); err != nil {
			return nil, entryErr("open directory", name, err)
		}
		if d.fresh = ds.made[name]; d.fresh {
			if d.file, err = d.root.Open("."); err != nil {
				d.root.Close()
				return nil, entryErr("open directory", name, err)
			}
			d.fd = int(d.file.Fd())
			d.plain = noDefaultACL(d.fd)
			if d.uid, d.gid, err = newOwner(d.fd); err != nil {
				d.file.Close()
				d.root.Close()
				return nil, entryErr("open directory", name, err)
			}
		}
	}
	ds.open[name] = d
	return d, nil
}

// noDefaultACL says whether the directory fd surely has no default ACL:
// the file system has no such attribute on it, or none at all.
func noDefaultACL(fd int) bool {
	_, err := unix.Fgetxattr(fd, "system.posix_acl_default", nil)
	return errors.Is(err, unix.ENODATA) || errors.Is(err, unix.EOPNOTSUPP)
}

// newOwner returns the owner and group of a file made in the directory
// dirfd by this process.
func newOwner(dirfd int) (uid, gid int, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		return 0, 0, err
	}
	if st.Mode&unix.S_ISGID != 0 {
		return unix.Geteuid(), int(st.Gid), nil
	}
	return unix.Geteuid(), unix.Getegid(), nil
}

// keepsOpen says whether making directory name (see mkdir), which opens
// it and its parent, keeps every open directory open.
func (ds *dirs) keepsOpen(name string) bool {
	return len(ds.open)+1 < maxOpenDirs
}

// mkdir makes directory name, or keeps it if it exists (as a real
// directory, not a link to one); it reports whether it made it. A
// directory it made is opened, for the files to come.
func (ds *dirs) mkdir(name string) (bool, error) {
	up, err := ds.of(filepath.Dir(name))
	if err != nil {
		return false, err
	}
	base := filepath.Base(name)
	err = up.root.Mkdir(base, 0o700)
	if err == nil {
		ds.made[name] = true
		_, err = ds.of(name)
		return err == nil, err
	}
	if fi, lerr := up.root.Lstat(base); lerr == nil && fi.IsDir() {
		return false, nil
	}
	return false, entryErr("make directory", name, err)
}

// spot returns where the file name goes: in its open directory.
func (ds *dirs) spot(name string) (spot, error) {
	d, err := ds.of(filepath.Dir(name))
	if err != nil {
		return spot{}, err
	}
	return spot{root: d.root, base: filepath.Base(name), name: name, in: d}, nil
}

// close closes the open directories (but not the extraction's root).
func (ds *dirs) close() {
	for _, d := range ds.open {
		if d.file != nil {
			d.file.Close()
		}
		if d.root != ds.root {
			d.root.Close()
		}
	}
	clear(ds.open)
}

// dropPartials removes the partial copies of the file base in d that no
// copy is writing, once base is complete. It lists d's partial files once,
// the first time, by name alone (fs.ReadDir would lstat every entry); a
// directory this extraction made holds none.
func (d *dir) dropPartials(base string) {
	if d.fresh {
		return
	}
	if d.partials == nil {
		d.partials = map[string][]string{}
		for _, n := range names(d.root) {
			if of, ok := partialOf(n); ok {
				d.partials[of] = append(d.partials[of], n)
			}
		}
	}
	for _, p := range d.partials[base] {
		if f, err := openPartialIn(d.root, p, 0, false); err == nil {
			d.root.Remove(p)
			f.Close()
		}
	}
	delete(d.partials, base)
}

// names returns the names in the directory root, as many as it could
// read.
func names(root *os.Root) []string {
	f, err := root.Open(".")
	if err != nil {
		return nil
	}
	defer f.Close()
	n, _ := f.Readdirnames(-1)
	return n
}
