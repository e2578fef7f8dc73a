// Package proto is what rdmacp's local and remote sides say to each other
// on the ssh channel: the request line, the status lines, the lines that
// follow them (forward, connect, from, offers), their bounds and how each
// is checked before it is acted on.
package proto

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Version is the version of the request and status lines. Both
// sides must speak the same one. Version 2 added downloads (Send,
// Connect), encryption and sparse files; version 3 has listings and
// their decisions as text, not JSON; version 4 has marks in a listing's
// entries (owners, ACLs, xattrs).
const Version = 4

// Bounds of what the remote side accepts in a request.
const (
	MaxRequestLine = 64 << 10
	MaxPathLen     = 4096
	maxNameLen     = 255
	MaxTimeout     = 24 * time.Hour
	keyLen         = 32
	MaxSources     = 1024
)

// Modes of a copy.
const (
	ModeFile   = "file"   // one regular file, streamed as is
	ModeSparse = "sparse" // one regular file with holes, as in file mode but streamed as a tar archive of one sparse entry (see internal/cp/tree/sparse.go)
	ModeTar    = "tar"    // files and directories, streamed as a tar archive
)

// Contents describes what a stream carries: one regular file as is, or a
// tar archive. The receiving side prepares the destination from it.
type Contents struct {
	Mode string `json:"mode"` // ModeFile, ModeSparse or ModeTar
	// Name is, in file mode (and in sparse mode, as everything said
	// here of file mode), the source's base name: the file's name in DST
	// when DST is a directory.
	Name string `json:"name,omitempty"`
	// Perm is, in file mode, the source's permission bits (with setuid,
	// setgid and sticky as in fs.FileMode).
	Perm  uint32 `json:"perm,omitempty"`
	ATime int64  `json:"atime,omitempty"` // in file mode with -p, Unix nanoseconds
	MTime int64  `json:"mtime,omitempty"` // in file mode with -p, Unix nanoseconds
	// Single says, in tar mode, that the archive holds one top-level
	// entry, which becomes DST itself when DST does not exist (like
	// scp -r dir host:newname).
	Single bool `json:"single,omitempty"`
	// Names are, in tar mode, the archive's top-level entries: what a
	// resume looks for at the destination.
	Names []string `json:"names,omitempty"`
	// Size and Changed (its modification time, Unix nanoseconds) are, in
	// file mode, the source's when the copy starts: the version of it that
	// a partial copy holds.
	Size    int64 `json:"size,omitempty"`
	Changed int64 `json:"changed,omitempty"`
	// Counts are, in a download's plan of an archive of several sources
	// (or a pattern), how many of Names each source asked for gave, in
	// order (0: it was left out); nil: one each.
	Counts []int `json:"counts,omitempty"`
	// Left is, in such a plan, how many paths the sending side left out
	// (missing, or not to be copied without -r): the copy then fails.
	Left int `json:"left,omitempty"`
	// Files says, in tar mode, that the archive was asked for without -r:
	// its entries must be regular files, each a top-level name (the
	// receiving side of a copy between two hosts checks it). An rdmacp
	// from before it refuses the field.
	Files bool `json:"files,omitempty"`
}

// isZero reports whether c describes nothing: a request that says no
// contents at all (a present but empty Names says something).
func (c Contents) isZero() bool {
	return c.Mode == "" && c.Name == "" && c.Perm == 0 && c.ATime == 0 && c.MTime == 0 &&
		!c.Single && c.Names == nil && c.Size == 0 && c.Changed == 0 && !c.Files
}

// validate checks contents described by the peer.
func (c Contents) validate() error {
	switch c.Mode {
	case ModeFile, ModeSparse:
		if err := CheckName(c.Name); err != nil {
			return err
		}
	case ModeTar:
	default:
		return fmt.Errorf("mode %.16q: must be %q, %q or %q", c.Mode, ModeFile, ModeSparse, ModeTar)
	}
	if c.Perm > 0o7777 {
		return fmt.Errorf("permissions %o: more than 07777", c.Perm)
	}
	if c.Size < 0 {
		return fmt.Errorf("size %d: negative", c.Size)
	}
	if len(c.Names) > MaxSources {
		return fmt.Errorf("%d top-level entries: more than %d", len(c.Names), MaxSources)
	}
	for _, n := range c.Names {
		if err := CheckName(n); err != nil {
			return err
		}
	}
	if len(c.Counts) > MaxSources || c.Left < 0 || c.Left > MaxSources {
		return fmt.Errorf("%d counts, %d left out: more than %d or negative", len(c.Counts), c.Left, MaxSources)
	}
	return nil
}

// Request is what the local side tells the remote side before the
// stream: one JSON line on the ssh channel (never on a command line, so
// the key does not show in ps). An upload's request names Dest and
// describes its Contents; a download's names the paths to Send and where
// to Connect to, and the remote side describes the contents in its plan
// (see status.go).
type Request struct {
	Version int    `json:"version"`
	Key     string `json:"key"`            // the one-time stream key, hex
	Dest    string `json:"dest,omitempty"` // an upload's DST as the user wrote it
	Contents
	// Send lists a download's sources, as the user wrote them.
	Send []string `json:"send,omitempty"`
	// Recursive allows, in a download, directories among the sources.
	Recursive bool `json:"recursive,omitempty"`
	// Connect is, in a download, where the remote side sends the stream:
	// the local side's listener, IP:PORT.
	Connect string `json:"connect,omitempty"`
	// ConnectLater says, in a download between two remote hosts, that
	// Connect is empty and a connect line (see ConnectLine) follows the
	// plan: the receiving host's address, once it listens.
	ConnectLater bool `json:"connect_later,omitempty"`
	// Encrypt asks for the stream's payload encrypted (the receiving side
	// then refuses a sender that does not encrypt).
	Encrypt bool `json:"encrypt,omitempty"`
	// Resume asks, in file mode, to go on from a partial copy (see
	// resume.go).
	Resume bool `json:"resume,omitempty"`
	// Preserve asks, in file mode, for Perm, ATime and MTime exactly;
	// in tar mode, for the archive's modes exactly. Else modes lose the
	// umask, setuid and setgid (and sticky on files).
	Preserve bool `json:"preserve,omitempty"`
	// Keep is, in tar mode, what the archive keeps besides data, modes and
	// times (see meta.Flags): the sending side writes it, the receiving
	// side applies it. An rdmacp from before it refuses the field.
	Keep string `json:"keep,omitempty"`
	// Listen is the address an upload's remote side listens on, an IP
	// address: the local side's --data-host, resolved there. Empty: the
	// address the ssh connection arrived on.
	Listen string `json:"listen,omitempty"`
	// Relay says, in an upload to several hosts (--to), that a forward
	// line follows the port: where this host passes the stream on.
	Relay bool `json:"relay,omitempty"`
	// Chain says, in a download that connects later, that a forward line
	// comes instead of the connect line: the chain of hosts to send the
	// stream down (--to from a remote host). An rdmacp from before it
	// refuses the request.
	Chain bool `json:"chain,omitempty"`
	// DataPorts is, in an upload, the ports the remote side may listen
	// on, LO-HI (--data-ports); empty: one of the system's choice.
	DataPorts string `json:"data_ports,omitempty"`
	// LimitRate is, in a download, the most bytes per second the remote
	// side sends (--limit-rate); 0: no limit.
	LimitRate int64 `json:"limit_rate,omitempty"`
	// Filter is, in a download, the rules of what the remote side leaves
	// out of its walk, as filter.Rules.Lines gives them (--exclude and
	// the like). An rdmacp from before it refuses the request.
	Filter []string `json:"filter,omitempty"`
	// List asks, in tar mode, for an incremental copy's listing (see
	// internal/cp/incr.go): in an upload, of what DST has of the archive's entries,
	// then the local side's decisions; in a download, of the sources,
	// then the local side's decisions. An rdmacp from before it refuses
	// the request.
	List bool `json:"list,omitempty"`
	// Checksum asks the listing for each regular file's hash (-c).
	Checksum bool `json:"checksum,omitempty"`
	// DryRun says that the remote side ends after its listing, having
	// changed nothing (-n).
	DryRun bool `json:"dry_run,omitempty"`
	// Progress asks, in a download, for the totals of a tar-mode plan
	// before the stream, for the progress line (see WriteTotal). An
	// rdmacp from before it refuses the request.
	Progress  bool          `json:"progress,omitempty"`
	Transport string        `json:"transport"`
	Timeout   time.Duration `json:"timeout"`
	Verbose   bool          `json:"verbose,omitempty"`
}

// KeyBytes returns the decoded key.
func (r Request) KeyBytes() []byte { return DecodeKey(r.Key) }

// DecodeKey decodes a key that validate has checked.
func DecodeKey(hexKey string) []byte {
	k, _ := hex.DecodeString(hexKey)
	return k
}

// NewKey returns a fresh one-time key.
func NewKey() []byte {
	key := make([]byte, keyLen)
	rand.Read(key)
	return key
}

// WriteRequest sends r as one line on w.
func WriteRequest(w io.Writer, r Request) error {
	return WriteJSONLine(w, r)
}

// WriteJSONLine sends v as one line of JSON on w: the local side's lines
// to the remote side.
func WriteJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// RequestOp names the remote side's reading of the request in its
// errors, which the local side recognises: an rdmacp of another version
// that cannot read the request says so with it.
const RequestOp = "read request"

// ReadRequest reads and checks one request line from br.
func ReadRequest(br *bufio.Reader) (Request, error) {
	var r Request
	if err := ReadJSONLine(br, &r); err != nil {
		return Request{}, conn.Errorf(conn.KindSetup, RequestOp, "%v", err)
	}
	if err := r.validate(); err != nil {
		return Request{}, conn.Errorf(conn.KindSetup, RequestOp, "%v", err)
	}
	return r, nil
}

// ReadJSONLine reads one line from br into v, refusing fields v has not.
func ReadJSONLine(br *bufio.Reader, v any) error {
	line, err := ReadLine(br, MaxRequestLine)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

// validate checks every field of a request from the local side.
func (r Request) validate() error {
	if r.Version != Version {
		return fmt.Errorf("protocol version %d, this rdmacp speaks %d: install the same rdmacp on both hosts", r.Version, Version)
	}
	if k, err := hex.DecodeString(r.Key); err != nil || len(k) != keyLen {
		return errors.New("the key is not 32 bytes in hex")
	}
	if err := CheckSettings(r.Transport, r.Timeout); err != nil {
		return err
	}
	if (r.Checksum || r.DryRun) && !r.List || r.List && (r.Resume || r.Relay || r.ConnectLater) {
		return errors.New("a checksum or dry run without a listing, or a listing with a resume, a relay or another host")
	}
	if _, err := meta.Parse(r.Keep); err != nil {
		return err
	}
	if r.Download() {
		return r.validateDownload()
	}
	if r.Connect != "" || r.ConnectLater || r.Chain || r.Recursive || r.LimitRate != 0 || r.Filter != nil || r.Progress {
		return errors.New("an upload's request names where to connect, a chain, recursion, a rate, filter rules or totals")
	}
	if r.Relay && r.Resume {
		return errors.New("a copy to several hosts cannot resume")
	}
	if err := checkPath("destination", r.Dest); err != nil {
		return err
	}
	if err := r.Contents.validate(); err != nil {
		return err
	}
	if r.DataPorts != "" {
		if _, err := ParsePorts(r.DataPorts); err != nil {
			return err
		}
	}
	if r.Listen != "" {
		if _, err := netip.ParseAddr(r.Listen); err != nil {
			return fmt.Errorf("listen address %.64q: %v", r.Listen, err)
		}
	}
	return nil
}

// ForwardLine is what the local side tells each host of a copy to
// several hosts once every one has its port: where the stream goes on,
// and the one-time key of the host there; and the hosts after that one
// (at most MaxFallbacks), to go on with if it dies. To is empty for the
// last host.
type ForwardLine struct {
	To   string        `json:"to"`
	Key  string        `json:"key,omitempty"`
	Then []ForwardLine `json:"then,omitempty"`
}

// MaxFallbacks is how many hosts after the next one a host of a copy to
// several hosts may go on with, one after the other, when the next one
// dies: so a chain survives that many dead hosts in a row. (A relay's
// history for a resend grows with them, up to eight windows, see
// pipe.SendConfig.Repair.)
const MaxFallbacks = 3

// Validate checks a forward line from the local side.
func (f ForwardLine) Validate() error {
	if f.To == "" {
		if f.Key != "" || f.Then != nil {
			return errors.New("a key or hosts after no host")
		}
		return nil
	}
	if len(f.Then) > MaxFallbacks {
		return fmt.Errorf("%d hosts to go on with: more than %d", len(f.Then), MaxFallbacks)
	}
	for _, h := range append([]ForwardLine{{To: f.To, Key: f.Key}}, f.Then...) {
		if h.Then != nil {
			return errors.New("hosts after a host to go on with")
		}
		if _, err := netip.ParseAddrPort(h.To); err != nil {
			return fmt.Errorf("address to pass the stream on to %.64q: %v", h.To, err)
		}
		if k, err := hex.DecodeString(h.Key); err != nil || len(k) != keyLen {
			return errors.New("a next host's key is not 32 bytes in hex")
		}
	}
	return nil
}

// Hops are the hosts of f.Then, as the engine takes them.
func (f ForwardLine) Hops() []pipe.Hop {
	var hs []pipe.Hop
	for _, h := range f.Then {
		hs = append(hs, pipe.Hop{Addr: h.To, Key: DecodeKey(h.Key)})
	}
	return hs
}

// Download says whether r asks the remote side to send.
func (r Request) Download() bool { return len(r.Send) > 0 }

// validateDownload checks the fields of a download's request: the
// sources and where to connect, and nothing of an upload's.
func (r Request) validateDownload() error {
	if r.Dest != "" || !r.Contents.isZero() || r.Listen != "" {
		return errors.New("a download's request describes a destination")
	}
	if len(r.Send) > MaxSources {
		return fmt.Errorf("%d sources: more than %d", len(r.Send), MaxSources)
	}
	if r.DataPorts != "" {
		return errors.New("a download's request names ports to listen on")
	}
	if r.LimitRate < 0 {
		return fmt.Errorf("rate %d: negative", r.LimitRate)
	}
	if _, err := filter.Parse(r.Filter); err != nil {
		return err
	}
	for _, p := range r.Send {
		if err := checkPath("source", p); err != nil {
			return err
		}
	}
	if r.Relay {
		return errors.New("a download's request asks to relay")
	}
	if r.Chain && (!r.ConnectLater || r.Resume) {
		return errors.New("a download down a chain of hosts that connects now, or resumes")
	}
	if r.ConnectLater {
		if r.Connect != "" {
			return errors.New("a copy between two hosts names where to connect now")
		}
		return nil
	}
	return CheckConnect(r.Connect)
}

// CheckConnect checks an address a download's remote side connects to:
// IP:PORT.
func CheckConnect(addr string) error {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return fmt.Errorf("address to connect to %.64q: %v", addr, err)
	}
	return nil
}

// ConnectLine is what the local side tells the sending host of a copy
// between two remote hosts (a request with ConnectLater) after its plan:
// where the receiving host listens for the stream, IP:PORT.
type ConnectLine struct {
	Connect string `json:"connect"`
}

// checkPath checks a path of a request: not empty, not too long, no NUL.
func checkPath(what, p string) error {
	if p == "" || len(p) > MaxPathLen || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%s %.64q: empty, too long or with a NUL byte", what, p)
	}
	return nil
}

// CheckSettings checks a transport name and a timeout, as the local side's
// flags and the request to the remote side carry them.
func CheckSettings(transport string, timeout time.Duration) error {
	switch transport {
	case "auto", "rdma", "tcp":
	default:
		return fmt.Errorf("transport %.16q: must be auto, rdma or tcp", transport)
	}
	if timeout < 0 || timeout > MaxTimeout {
		return fmt.Errorf("timeout %v: must be 0 to %v", timeout, MaxTimeout)
	}
	return nil
}

// CheckName checks that name is one plain path element.
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > maxNameLen || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("file name %.64q: not one plain path element", name)
	}
	return nil
}

// CheckEntryName checks an archive entry's name, as the archive or an
// offer has it: a relative path, without "..", that names a file.
func CheckEntryName(name string) error {
	if name == "" || len(name) > MaxPathLen || strings.ContainsRune(name, 0) {
		return fmt.Errorf("archive entry %.64q: empty, too long or with a NUL byte", name)
	}
	if strings.HasPrefix(name, "/") {
		return fmt.Errorf("archive entry %q: absolute path refused", name)
	}
	if slices.Contains(strings.Split(name, "/"), "..") {
		return fmt.Errorf("archive entry %q: '..' refused", name)
	}
	if path.Clean(name) == "." {
		return fmt.Errorf("archive entry %q: names no file", name)
	}
	return nil
}

// ReadLine reads one line of at most max bytes from br, without the
// newline.
func ReadLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > max {
			return nil, fmt.Errorf("line longer than %d bytes", max)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}
