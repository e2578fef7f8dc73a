package meta

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Apply gives the entry base in the directory dirfd, which the archive
// entry h called name put there with mode, what the flags keep of it (see
// apply), never following a link.
func (a *Applier) Apply(dirfd int, base, name string, h *tar.Header, mode fs.FileMode) error {
	if !a.Applies() {
		return nil
	}
	return a.apply(atPath{dirfd, base}, name, h, mode)
}

// NewFile is a regular file being made, open as FD, the owner and group
// it was made with, and whether it may have inherited ACLs (its
// directory has a default ACL).
type NewFile struct {
	FD, UID, GID int
	Inherits     bool
}

// ApplyFD gives f, the regular file that the archive entry h called name
// is being written to with mode, what the flags keep of it (see apply);
// it may be called from several goroutines at once.
func (a *Applier) ApplyFD(f NewFile, name string, h *tar.Header, mode fs.FileMode) error {
	if !a.Applies() {
		return nil
	}
	return a.apply(f, name, h, mode)
}

// apply gives n, which the archive entry h called name put there with
// mode, its owner and group (as root; mode again after them where it has
// setuid or setgid, which chown clears), then its xattrs and ACLs. What it
// cannot keep it notes, once each.
func (a *Applier) apply(n node, name string, h *tar.Header, mode fs.FileMode) error {
	link := h.Typeflag == tar.TypeSymlink
	if a.chown(n, name, h) && !link && mode&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		if err := n.chmod(UnixMode(mode)); err != nil {
			return fmt.Errorf("chmod %q: %w", name, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(h.PAXRecords)) {
		x, ok := strings.CutPrefix(k, XattrPrefix)
		if !ok || !a.takes(x, name, h.Typeflag) {
			continue
		}
		if err := n.setxattr(x, []byte(h.PAXRecords[k])); err != nil {
			a.notes.once("set "+x+err.Error(), "%s: %s of %q not kept: %v", flagOf(x), x, name, err)
		}
	}
	return a.unInherit(n, name, h, mode)
}

// unInherit removes from n, with -A, the ACLs that the archive entry h
// (called name, put there with mode) does not have and n may have
// inherited from its directory's default ACL, as rsync -A does; then it
// gives n its mode again, which the access ACL's mask held.
func (a *Applier) unInherit(n node, name string, h *tar.Header, mode fs.FileMode) error {
	if !a.f.ACLs || h.Typeflag == tar.TypeSymlink || !n.inherits() {
		return nil
	}
	acls := []string{aclAccess}
	if h.Typeflag == tar.TypeDir {
		acls = append(acls, aclDefault)
	}
	removed := false
	for _, x := range acls {
		if _, ok := h.PAXRecords[XattrPrefix+x]; ok {
			continue
		}
		err := n.removexattr(x)
		switch {
		case err == nil:
			removed = removed || x == aclAccess
		case !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP):
			return fmt.Errorf("remove the inherited %s of %q: %w", x, name, err)
		}
	}
	if removed {
		if err := n.chmod(UnixMode(mode)); err != nil {
			return fmt.Errorf("chmod %q: %w", name, err)
		}
	}
	return nil
}

// node is an entry that apply gives its metadata to; chown says whether
// it changed the owner or group (-1: kept), inherits whether it may have
// ACLs it was not given.
type node interface {
	chown(uid, gid int) (bool, error)
	chmod(mode uint32) error
	setxattr(name string, value []byte) error
	removexattr(name string) error
	inherits() bool
}

// atPath is the entry base in the directory dirfd, never followed if a
// link.
type atPath struct {
	dirfd int
	base  string
}

func (p atPath) chown(uid, gid int) (bool, error) {
	return true, unix.Fchownat(p.dirfd, p.base, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
}

func (p atPath) chmod(mode uint32) error { return unix.Fchmodat(p.dirfd, p.base, mode, 0) }

func (p atPath) setxattr(name string, value []byte) error {
	return unix.Lsetxattr(p.path(), name, value, 0)
}

func (p atPath) removexattr(name string) error { return unix.Lremovexattr(p.path(), name) }

func (p atPath) inherits() bool { return true }

// path is where p is, through this process's descriptor of its directory.
func (p atPath) path() string { return "/proc/self/fd/" + strconv.Itoa(p.dirfd) + "/" + p.base }

// chown changes nothing where f has the owner and group asked already.
func (f NewFile) chown(uid, gid int) (bool, error) {
	if (uid < 0 || uid == f.UID) && (gid < 0 || gid == f.GID) {
		return false, nil
	}
	return true, unix.Fchown(f.FD, uid, gid)
}

func (f NewFile) chmod(mode uint32) error { return unix.Fchmod(f.FD, mode) }

func (f NewFile) setxattr(name string, value []byte) error {
	return unix.Fsetxattr(f.FD, name, value, 0)
}

func (f NewFile) removexattr(name string) error { return unix.Fremovexattr(f.FD, name) }

func (f NewFile) inherits() bool { return f.Inherits }

// takes says whether the xattr x of the entry name, of type typ, is to
// be set: an ACL with -A (a default one on a directory only, none on a
// symbolic link); another with -X, of a namespace this process may set
// (noted once otherwise).
func (a *Applier) takes(x, name string, typ byte) bool {
	switch {
	case x == aclAccess || x == aclDefault:
		return a.f.ACLs && typ != tar.TypeSymlink && (x == aclAccess || typ == tar.TypeDir)
	case !a.f.Xattrs:
		return false
	case !allowed(x, a.root):
		a.notes.once("ns "+namespace(x), "-X: %s.* xattrs are not kept here (user.* only, as non-root; no system.*), such as %s of %q", namespace(x), x, name)
		return false
	}
	return true
}

// flagOf names the flag that keeps the xattr x.
func flagOf(x string) string {
	if x == aclAccess || x == aclDefault {
		return "-A"
	}
	return "-X"
}

// chown gives n, the entry h called name, the owner and group of h, as
// root and as the flags say; it says whether that changed them. What it
// cannot give, it notes.
func (a *Applier) chown(n node, name string, h *tar.Header) bool {
	if !a.f.Owner && !a.f.Group {
		return false
	}
	if !a.root {
		a.notes.once("owner", "--owner, -g: not root here: owners and groups are not kept")
		return false
	}
	uid, gid := -1, -1
	a.mu.Lock()
	if a.f.Owner {
		uid = a.id(a.uids, h.Uname, h.Uid, user.Lookup)
	}
	if a.f.Group {
		gid = a.id(a.gids, h.Gname, h.Gid, lookupGroup)
	}
	a.mu.Unlock()
	changed, err := n.chown(uid, gid)
	if err != nil {
		a.notes.once("chown "+err.Error(), "--owner, -g: owner of %q not kept: %v", name, err)
		return false
	}
	return changed
}

// id returns the id to give for name and id of an archive entry: that of
// the user (or group) name here, looked up once, unless --numeric-ids or
// no name or no such name here; else id.
func (a *Applier) id(cache map[string]int, name string, id int, lookup func(string) (*user.User, error)) int {
	if a.f.NumericIDs || name == "" {
		return id
	}
	local, ok := cache[name]
	if !ok {
		local = -1
		if u, err := lookup(name); err == nil {
			local, _ = strconv.Atoi(u.Uid)
		}
		cache[name] = local
	}
	if local < 0 {
		return id
	}
	return local
}

// lookupGroup looks up the group name, its id as a User's Uid (for id).
func lookupGroup(name string) (*user.User, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return nil, err
	}
	return &user.User{Uid: g.Gid}, nil
}

// Special makes the device or named pipe of the archive entry h called
// name at base in dirfd, with mode, and says whether it did: a named pipe
// always, a device only as root (else it notes, once, that devices are
// not made).
func (a *Applier) Special(dirfd int, base, name string, h *tar.Header, mode fs.FileMode) (bool, error) {
	typ := map[byte]uint32{tar.TypeFifo: unix.S_IFIFO, tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK}[h.Typeflag]
	if typ != unix.S_IFIFO && !a.root {
		a.notes.once("devices", "-D: not root here: devices are not made, such as %q", name)
		return false, nil
	}
	dev := unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))
	if err := unix.Mknodat(dirfd, base, typ|0o600, int(dev)); err != nil {
		return false, fmt.Errorf("mknod %q: %w", name, err)
	}
	if err := unix.Fchmodat(dirfd, base, UnixMode(mode), 0); err != nil {
		return false, fmt.Errorf("chmod %q: %w", name, err)
	}
	return true, nil
}

// UnixMode returns the system's mode bits for m's permission, setuid,
// setgid and sticky bits.
func UnixMode(m fs.FileMode) uint32 {
	o := uint32(m.Perm())
	for _, b := range []struct {
		m   fs.FileMode
		sys uint32
	}{{fs.ModeSetuid, unix.S_ISUID}, {fs.ModeSetgid, unix.S_ISGID}, {fs.ModeSticky, unix.S_ISVTX}} {
		if m&b.m != 0 {
			o |= b.sys
		}
	}
	return o
}
