package meta

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// XattrPrefix starts the PAX record of an extended attribute, as GNU tar
// and archive/tar write it: SCHILY.xattr.NAME=VALUE.
const XattrPrefix = "SCHILY.xattr."

// The ACLs travel as the extended attributes that hold them, in the
// kernel's binary form (named users and groups by number).
const (
	aclAccess  = "system.posix_acl_access"
	aclDefault = "system.posix_acl_default"
)

// Reader reads what Flags keep of the files of a copy into their
// archive headers, on the sending side.
type Reader struct {
	f      Flags
	root   bool
	notes  notes
	links  map[fileID]string // the first name of each file with several links
	users  map[int]string
	groups map[int]string
}

// fileID is a file's identity: its device and inode.
type fileID struct{ dev, ino uint64 }

// NewReader returns a Reader of what f keeps, for a process that is
// root if root, with notes on warn.
func NewReader(f Flags, root bool, warn io.Writer) *Reader {
	return &Reader{f: f, root: root, notes: notes{w: warn}, links: map[fileID]string{}, users: map[int]string{}, groups: map[int]string{}}
}

// Header adds to h, the header of the file at path that fi describes,
// what the flags keep of it: a hard link to the first name of the file
// in the archive, its user and group names, its xattrs and ACLs.
func (r *Reader) Header(path string, fi fs.FileInfo, h *tar.Header) error {
	if r.link(fi, h) {
		return nil
	}
	if r.f.Owner {
		h.Uname = r.name(r.users, h.Uid, true)
	}
	if r.f.Group {
		h.Gname = r.name(r.groups, h.Gid, false)
	}
	if !r.f.Xattrs && !r.f.ACLs {
		return nil
	}
	names, err := r.xattrNames(path, fi)
	if err != nil {
		return fmt.Errorf("list xattrs of %s: %w", path, err)
	}
	for _, name := range names {
		v, err := getxattr(path, name)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read xattr %s of %s: %w", name, path, err)
		}
		if h.PAXRecords == nil {
			h.PAXRecords = map[string]string{}
		}
		h.PAXRecords[XattrPrefix+name] = string(v)
	}
	return nil
}

// link makes h, a regular file's header, a hard link to the file's first
// name in the archive if it has one and Links is set, and says whether it
// did; else it remembers h's name as the file's first.
func (r *Reader) link(fi fs.FileInfo, h *tar.Header) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !r.f.Links || !ok || !fi.Mode().IsRegular() || st.Nlink < 2 {
		return false
	}
	id := fileID{uint64(st.Dev), st.Ino}
	first, seen := r.links[id]
	if !seen {
		r.links[id] = h.Name
		return false
	}
	h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
	return true
}

// name returns the name of user (or group) id, looked up once, "" if it
// has none.
func (r *Reader) name(cache map[int]string, id int, isUser bool) string {
	if n, ok := cache[id]; ok {
		return n
	}
	var n string
	if isUser {
		if u, err := user.LookupId(strconv.Itoa(id)); err == nil {
			n = u.Username
		}
	} else if g, err := user.LookupGroupId(strconv.Itoa(id)); err == nil {
		n = g.Name
	}
	cache[id] = n
	return n
}

// xattrNames returns the names of the xattrs of the file at path to
// send: with -X those of the namespaces this process may send (see
// allowed), with -A the ACLs (not on a symbolic link, which has none).
func (r *Reader) xattrNames(path string, fi fs.FileInfo) ([]string, error) {
	link := fi.Mode()&fs.ModeSymlink != 0
	if !r.f.Xattrs {
		if link {
			return nil, nil
		}
		return []string{aclAccess, aclDefault}, nil
	}
	all, err := listxattr(path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range all {
		switch {
		case n == aclAccess || n == aclDefault:
			if r.f.ACLs {
				names = append(names, n)
			}
		case allowed(n, r.root):
			names = append(names, n)
		case !strings.HasPrefix(n, "system."):
			r.notes.once("send "+namespace(n), "-X: %s: %s.* xattrs are not sent (only as root), nor others'", path, namespace(n))
		}
	}
	return names, nil
}

// allowed says whether the xattr name is of a namespace that -X keeps
// for a process that is root if root: user.*, and as root trusted.* and
// security.* too.
func allowed(name string, root bool) bool {
	switch namespace(name) {
	case "user":
		return true
	case "trusted", "security":
		return root
	}
	return false
}

// namespace returns the namespace of the xattr name: what comes before
// its first dot.
func namespace(name string) string {
	ns, _, _ := strings.Cut(name, ".")
	return ns
}

// listxattr returns the names of the xattrs of the file at path, not
// following a link; none where the file system has none.
func listxattr(path string) ([]string, error) {
	return xattrNames(func(b []byte) (int, error) { return unix.Llistxattr(path, b) })
}

// xattrNames returns the names of xattrs that list, a listxattr call,
// gives, sorted; none where the file system has none.
func xattrNames(list func([]byte) (int, error)) ([]string, error) {
	buf, err := sized(list)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for n := range strings.SplitSeq(string(buf), "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

// getxattr returns the value of the xattr name of the file at path, not
// following a link.
func getxattr(path, name string) ([]byte, error) {
	v, err := sized(func(b []byte) (int, error) { return unix.Lgetxattr(path, name, b) })
	if errors.Is(err, unix.ENOTSUP) {
		return nil, unix.ENODATA
	}
	return v, err
}

// sized calls get, a call that fills a buffer or with none says how big
// it must be, with a buffer big enough, again if it grew meanwhile.
func sized(get func([]byte) (int, error)) ([]byte, error) {
	for {
		n, err := get(nil)
		if err != nil || n == 0 {
			return nil, err
		}
		b := make([]byte, n)
		n, err = get(b)
		if !errors.Is(err, unix.ERANGE) {
			return b[:n], err
		}
	}
}
