package doctor

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
)

// Fixes quoted by the checks.
const (
	fixDriver  = "load an RDMA driver: modprobe mlx5_ib (ConnectX) or your NIC's; without RDMA hardware, SoftRoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0"
	fixMemlock = "ulimit -l unlimited before the command (hard limit: '* - memlock unlimited' in /etc/security/limits.conf, or LimitMEMLOCK=infinity for a systemd service), or give the binary CAP_IPC_LOCK: setcap cap_ipc_lock+ep $(command -v rdmasend rdmarecv)"
	fixRecv    = "start the receiver on the peer: rdmarecv > FILE (rdmarecv -k keeps it up between streams)"
	fixBusy    = "the receiver is serving another stream: wait for it, or let the sender retry with rdmasend --wait 1m"
	fixStripe  = "let the receiver listen on all addresses (no --bind) with several devices (its --device lists them, or none), each with an address this host reaches from a device of --device"
	fixKey     = "give both sides the same key: --key-file FILE (or RDMAPIPE_KEY) on rdmasend and rdmarecv"
)

// Judge turns facts into a report: each check OK, WARN or FAIL with its
// fix, and whether a stream would work. A failure on a path a stream may
// do without (RDMA when auto falls back to TCP, TCP when RDMA works) is a
// warning; on a path it needs, a failure.
func Judge(f Facts) Report {
	r := Report{Command: f.Command, Transport: f.Transport}
	rdmaOK, tcpOK := f.rdmaWorks(), f.TCPPath != nil && f.TCPPath.Err == nil
	rdmaSev := severity(f.Transport == "rdma" || f.Transport == "auto" && !tcpOK)
	tcpSev := severity(f.Transport == "tcp" || f.Transport == "auto" && !rdmaOK)

	f.judgeDevices(&r, rdmaSev)
	f.judgeMemory(&r, rdmaSev)
	f.judgeHugePages(&r)
	f.judgeCores(&r)
	if f.Peer != "" {
		f.judgeRoute(&r, rdmaSev)
		judgeProbe(&r, "rdma handshake", f.RDMAPath, rdmaSev, len(f.Key) > 0)
		f.judgeStripe(&r)
		judgeProbe(&r, "tcp handshake", f.TCPPath, tcpSev, len(f.Key) > 0)
	} else {
		judgeListen(&r, "rdma listen", f.RDMAPath, rdmaSev)
		judgeListen(&r, "tcp listen", f.TCPPath, tcpSev)
	}

	switch {
	case rdmaOK && f.Transport != "tcp":
		r.OK, r.Path = true, "rdma"
	case tcpOK && f.Transport != "rdma":
		r.OK, r.Path = true, "tcp"
	}
	r.Verdict = f.verdict(r)
	return r
}

// severity is the status of a failure on a path: FAIL if a stream needs
// the path, else WARN.
func severity(needed bool) Status {
	if needed {
		return Fail
	}
	return Warn
}

// rdmaWorks reports whether a stream could go over RDMA.
func (f Facts) rdmaWorks() bool {
	if f.RDMAPath == nil || f.RDMAPath.Err != nil {
		return false
	}
	return f.Peer != "" || !f.Memory.TooLittle
}

// verdict is the report's last line.
func (f Facts) verdict(r Report) string {
	where := "a stream to " + f.Peer
	if f.Peer == "" {
		where = "a receiver listening on " + f.Listen
	}
	if !r.OK {
		// The last failure is the most telling: the handshakes and
		// listeners come last, after the host's facts they depend on.
		for i := len(r.Checks) - 1; i >= 0; i-- {
			if c := r.Checks[i]; c.Status == Fail {
				return fmt.Sprintf("%s would not work: %s: %s", where, c.Name, c.Detail)
			}
		}
		return where + " would not work"
	}
	if r.Path == "rdma" {
		if f.Peer == "" {
			return where + " would take streams over RDMA and TCP"
		}
		return fmt.Sprintf("%s would go over RDMA (%s port %d)", where, f.RDMAPath.Value.Info.Device, f.RDMAPath.Value.Info.Port)
	}
	why := "--transport tcp"
	if f.Transport != "tcp" {
		why = "no RDMA path"
		for _, c := range r.Checks {
			if c.Status != OK {
				why = fmt.Sprintf("no RDMA path: %s: %s", c.Name, c.Detail)
				break
			}
		}
	}
	if f.Peer == "" {
		return fmt.Sprintf("%s would take streams over TCP only (%s)", where, why)
	}
	return fmt.Sprintf("%s would go over TCP (%s)", where, why)
}

// judgeDevices reports the devices, their ports and GIDs.
func (f Facts) judgeDevices(r *Report, sev Status) {
	switch {
	case f.DevicesErr != nil:
		r.add("rdma devices", sev, fixDriver, "%v", f.DevicesErr)
		return
	case len(f.Devices) == 0:
		detail := "none: this host has no RDMA device (/sys/class/infiniband is empty or missing)"
		if f.Transport != "rdma" {
			detail += "; streams can only use TCP"
		}
		r.add("rdma devices", sev, fixDriver, "%s", detail)
		return
	}
	var names []string
	active := 0
	for _, d := range f.Devices {
		names = append(names, fmt.Sprintf("%s (%s)", d.Name, d.Transport))
		for _, p := range d.Ports {
			if p.Active() {
				active++
			}
		}
	}
	if f.RDMAErr != nil {
		r.add("rdma devices", sev, "", "%s, but %v", strings.Join(names, ", "), f.RDMAErr)
	} else {
		r.add("rdma devices", OK, "", "%d: %s", len(f.Devices), strings.Join(names, ", "))
	}
	chosen := f.chosenGID()
	for _, d := range f.Devices {
		for _, p := range d.Ports {
			name := fmt.Sprintf("%s port %d", d.Name, p.Num)
			status, fix := OK, ""
			if !p.Active() {
				status, fix = Warn, portFix(d, p)
				if active == 0 {
					status = sev
				}
			}
			r.add(name, status, fix, "%s", portDetail(d, p))
			for _, g := range p.GIDs {
				detail := g.GID.String()
				if g.Type != "" {
					detail += " " + g.Type
				}
				if g.NetDev != "" {
					detail += " (" + g.NetDev + ")"
				}
				if d.Name == chosen.dev && p.Num == chosen.port && g.Index == chosen.index {
					detail += " <- rdma_cm's choice for " + f.Peer + " (" + chosen.why + ")"
				}
				r.add(fmt.Sprintf("%s gid %d", name, g.Index), OK, "", "%s", detail)
			}
			if len(p.GIDs) == 0 && p.Active() && d.Transport == "RoCE" {
				r.add(name+" gids", Warn, "give the port's network interface an IP address (ip addr add ADDR/PREFIX dev IFACE): RoCE GIDs come from its addresses", "none: rdma_cm cannot reach anything through this port")
			}
		}
	}
}

// portDetail describes a port's state, link, rate and MTU.
func portDetail(d rdma.Device, p rdma.Port) string {
	s := p.State
	if p.PhysState != "" {
		s += " (" + p.PhysState + ")"
	}
	link := d.Transport
	if p.Rate != "" {
		link += ", " + p.Rate
	}
	mtu := fmt.Sprintf("active MTU %d (max %d)", p.ActiveMTU, p.MaxMTU)
	if p.MTUErr != nil {
		mtu = fmt.Sprintf("MTU unknown (%v)", p.MTUErr)
	}
	return fmt.Sprintf("%s, %s, %s", s, link, mtu)
}

// portFix says how to bring a port up.
func portFix(d rdma.Device, p rdma.Port) string {
	if p.LinkLayer == "InfiniBand" {
		return "check the cable and that a subnet manager runs on the fabric (ibstat; systemctl start opensm)"
	}
	for _, g := range p.GIDs {
		if g.NetDev != "" {
			return "bring up its network interface: ip link set " + g.NetDev + " up"
		}
	}
	return "bring up the network interface " + d.Name + " is bound to (rdma link show; ip link set IFACE up)"
}

// gidChoice is the GID table entry a connection to the peer uses.
type gidChoice struct {
	dev   string
	port  int
	index int
	why   string
}

// chosenGID finds the GID entry rdma_cm uses for the peer: the index the
// handshake's queue pair reported, or else, among the entries holding the
// source GID rdma_cm resolved, the RoCE v2 one (the kernel's default
// RoCE mode) or the only one.
func (f Facts) chosenGID() gidChoice {
	if f.Route == nil || f.Route.Err != nil || f.Route.Value.IWARP {
		return gidChoice{index: -1}
	}
	rt := f.Route.Value
	c := gidChoice{dev: rt.Device, port: rt.Port, index: -1}
	if f.RDMAPath != nil && f.RDMAPath.Err == nil && f.RDMAPath.Value.GIDIndex >= 0 {
		c.index, c.why = f.RDMAPath.Value.GIDIndex, "used by the handshake's queue pair"
		return c
	}
	for _, d := range f.Devices {
		for _, p := range d.Ports {
			if d.Name != rt.Device || p.Num != rt.Port {
				continue
			}
			for _, g := range p.GIDs {
				if g.GID != rt.GID {
					continue
				}
				if c.index < 0 || g.Type == "RoCE v2" {
					c.index, c.why = g.Index, "resolved source GID"
					if g.Type == "RoCE v2" {
						c.why = "resolved source GID, RoCE v2: the kernel's default mode"
					}
				}
			}
		}
	}
	return c
}

// judgeMemory reports RLIMIT_MEMLOCK and CAP_IPC_LOCK against the window.
func (f Facts) judgeMemory(r *Report, sev Status) {
	m := f.Memory
	limits := fmt.Sprintf("RLIMIT_MEMLOCK soft %s, hard %s", limitString(m.Soft), limitString(m.Hard))
	if m.CapIPCLock {
		limits += ", CAP_IPC_LOCK held"
	} else {
		limits += ", no CAP_IPC_LOCK"
	}
	switch {
	case m.Unlimited || m.CapIPCLock:
		r.add("locked memory", OK, "", "%s: the default window %s locks up to %s on this side", limits, m.FullWindow, mib(m.FullLocks))
	case m.TooLittle:
		r.add("locked memory", sev, fixMemlock, "%s: too little for RDMA buffers even at the smallest window", limits)
	default:
		r.add("locked memory", Warn, fixMemlock, "%s: the default window shrinks to %s (locks up to %s); the full window %s needs %s",
			limits, m.Window, mib(m.Locks), m.FullWindow, mib(m.FullLocks))
	}
}

// judgeHugePages reports whether the buffers can sit on 2 MiB huge pages.
// Without them the buffers use normal pages, which works: never a warning.
func (f Facts) judgeHugePages(r *Report) {
	h := f.HugePages
	need := f.Memory.HugePages
	if f.Memory.Unlimited || f.Memory.CapIPCLock {
		need = f.Memory.FullHugePages
	}
	switch {
	case h.Err != nil:
		r.add("huge pages", OK, "", "no 2 MiB huge page pool (%v): buffers use normal pages", h.Err)
	case h.Free >= need:
		r.add("huge pages", OK, "", "%d of %d 2 MiB huge pages free; this side's buffers take %d", h.Free, h.Total, need)
	default:
		r.add("huge pages", OK, "", "%d of %d 2 MiB huge pages free, the buffers would take %d: they use normal pages (fine; for huge pages: sysctl -w vm.nr_hugepages=%d)",
			h.Free, h.Total, need, h.Total-h.Free+need)
	}
}

// judgeRoute reports where rdma_cm resolves the peer.
func (f Facts) judgeRoute(r *Report, sev Status) {
	if f.Route == nil {
		return
	}
	if err := f.Route.Err; err != nil {
		fix := "check that the peer is up and reachable (ping), and that its address is on an RDMA network"
		if conn.KindOf(err) == conn.KindNoRDMA {
			fix = "use the peer's address on an RDMA interface (an IPoIB or RoCE netdev): ip route get PEER must leave through one"
		}
		r.add("rdma route", sev, fix, "%v", err)
		return
	}
	rt := f.Route.Value
	if rt.IWARP {
		r.add("rdma route", OK, "", "%s via %s port %d (iWARP, no GID), local %s", rt.Peer, rt.Device, rt.Port, rt.Local)
		return
	}
	gid := "GID " + rt.GID.String()
	if c := f.chosenGID(); c.index >= 0 {
		gid = fmt.Sprintf("%s (index %d, %s)", gid, c.index, f.gidType(c))
	}
	r.add("rdma route", OK, "", "%s via %s port %d, local %s, %s", rt.Peer, rt.Device, rt.Port, rt.Local, gid)
}

// gidType returns the type of the chosen GID entry.
func (f Facts) gidType(c gidChoice) string {
	for _, d := range f.Devices {
		for _, p := range d.Ports {
			for _, g := range p.GIDs {
				if d.Name == c.dev && p.Num == c.port && g.Index == c.index && g.Type != "" {
					return g.Type
				}
			}
		}
	}
	return "type unknown"
}

// judgeStripe reports, when --device names several devices or all, the
// devices the RDMA handshake's connection striped its queue pairs over:
// a warning when that was only one.
func (f Facts) judgeStripe(r *Report) {
	d := f.RDMA.Device
	if d != "all" && !strings.Contains(d, ",") || f.RDMAPath == nil || f.RDMAPath.Err != nil {
		return
	}
	info := f.RDMAPath.Value.Info
	used := strings.Split(info.Device, ",")
	if len(used) < 2 {
		r.add("rdma devices used", Warn, fixStripe, "only %s of --device %s: no other device of the receiver's was reachable from one of them", info.Device, d)
		return
	}
	r.add("rdma devices used", OK, "", "%s, %d queue pairs striped over them", strings.Join(used, ", "), info.QPs)
}

// judgeProbe reports a handshake with the receiver.
func judgeProbe(r *Report, name string, res *Result[Probe], sev Status, keyed bool) {
	if res == nil {
		return
	}
	if err := res.Err; err != nil {
		r.add(name, sev, probeFix(err), "%v", err)
		return
	}
	p := res.Value
	via := fmt.Sprintf("%s -> %s", p.Info.Local, p.Info.Remote)
	if p.Info.Device != "" {
		via = fmt.Sprintf("%s port %d (%s), %s", p.Info.Device, p.Info.Port, p.Info.DataPath, via)
		if p.GIDIndex >= 0 {
			via += fmt.Sprintf(", GID index %d", p.GIDIndex)
		}
	}
	key := "no key"
	if keyed {
		key = "key proofs verified both ways"
	}
	r.add(name, OK, "", "connected and handshook in %s (no data sent): %s, chunk %s x %d, %s",
		p.Elapsed.Round(time.Millisecond), via, units.Size(int64(p.Info.Chunk)), p.Info.Depth, key)
}

// probeFix says what to do about a failed handshake.
func probeFix(err error) string {
	switch {
	case conn.KindOf(err) == conn.KindBusy:
		return fixBusy
	case conn.KindOf(err) == conn.KindAuth:
		return fixKey
	case errors.Is(err, conn.ErrLocal):
		return fixMemlock
	case strings.Contains(err.Error(), "refused"), strings.Contains(err.Error(), "nothing listening"):
		return fixRecv
	}
	return "run the receiver with -v to see why it refused; check that both hosts run the same rdmapipe release"
}

// judgeListen reports a listener of rdmarecv --check.
func judgeListen(r *Report, name string, res *Result[Probe], sev Status) {
	if res == nil {
		return
	}
	if res.Err != nil {
		r.add(name, sev, "stop whatever uses the port (ss -ltnp), or pick another: --port N on both sides", "%v", res.Err)
		return
	}
	r.add(name, OK, "", "listening on %s works", res.Value.Addr)
}

// limitString formats a memlock limit (RLIM_INFINITY is all ones).
func limitString(n uint64) string {
	if n == math.MaxUint64 {
		return "unlimited"
	}
	return units.Size(int64(n))
}

// mib formats a byte count in MiB with one decimal.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
