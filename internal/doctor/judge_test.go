package doctor

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
)

// rxeFacts are the facts of a healthy SoftRoCE host whose checks all pass.
func rxeFacts(transport string) Facts {
	gid := netip.MustParseAddr("::ffff:10.0.3.1")
	return Facts{
		Config: Config{Command: "rdmasend --check 10.0.3.1:18800", Peer: "10.0.3.1:18800", Transport: transport,
			Memory: Memory{Soft: math.MaxUint64, Hard: math.MaxUint64, Unlimited: true, Window: "4 MiB x 8", Locks: 32 << 20, FullWindow: "4 MiB x 8", FullLocks: 32 << 20}},
		Devices: []rdma.Device{{Name: "rxe0", Transport: "RoCE", Ports: []rdma.Port{{Num: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet",
			ActiveMTU: 1024, MaxMTU: 4096, GIDs: []rdma.GID{{Index: 2, GID: gid, Type: "IB/RoCE v1", NetDev: "dummy0"}, {Index: 3, GID: gid, Type: "RoCE v2", NetDev: "dummy0"}}}}}},
		HugePages: HugePages{Total: 0, Free: 0},
		Route:     &Result[rdma.Route]{Value: rdma.Route{Peer: "10.0.3.1:18800", Device: "rxe0", Port: 1, GID: gid, Local: "10.0.3.1:0"}},
		RDMAPath:  &Result[Probe]{Value: Probe{Info: conn.Info{Transport: "rdma", Device: "rxe0", Port: 1, DataPath: "write", Chunk: 4 << 20, Depth: 8}, GIDIndex: -1}},
		TCPPath:   &Result[Probe]{Value: Probe{Info: conn.Info{Transport: "tcp", Chunk: 4 << 20, Depth: 8}}},
	}
}

func TestJudge(t *testing.T) {
	refused := &conn.Error{Kind: conn.KindSetup, Op: "connect 10.0.3.1:18800", Err: errors.New("connection refused by peer (nothing listening?)")}
	cases := []struct {
		name   string
		facts  func() Facts
		ok     bool
		path   string
		lines  []string // "STATUS name" prefixes that must appear
		phrase []string
	}{
		{"healthy rxe", func() Facts { return rxeFacts("auto") }, true, "rdma",
			[]string{"OK rdma devices", "OK rxe0 port 1", "OK rdma route", "OK rdma handshake", "OK tcp handshake"},
			[]string{"index 3, RoCE v2", "RoCE v2 (dummy0) <- rdma_cm's choice for 10.0.3.1:18800 (resolved source GID, RoCE v2: the kernel's default mode)", "would go over RDMA (rxe0 port 1)"}},
		{"the handshake's GID index wins", func() Facts {
			f := rxeFacts("auto")
			f.RDMAPath.Value.GIDIndex = 2
			return f
		}, true, "rdma", nil, []string{"index 2, IB/RoCE v1", "(used by the handshake's queue pair)", "GID index 2"}},
		{"no device, auto: TCP", func() Facts {
			f := rxeFacts("auto")
			f.Devices, f.Route, f.RDMAPath, f.RDMAErr = nil, nil, nil, errors.New("no RDMA devices found")
			return f
		}, true, "tcp", []string{"WARN rdma devices", "OK tcp handshake"}, []string{"this host has no RDMA device", "would go over TCP (no RDMA path"}},
		{"no device, rdma: fail", func() Facts {
			f := rxeFacts("rdma")
			f.Devices, f.Route, f.RDMAPath, f.RDMAErr = nil, nil, nil, errors.New("no RDMA devices found")
			return f
		}, false, "", []string{"FAIL rdma devices", "OK tcp handshake"}, []string{"fix: load an RDMA driver"}},
		{"rdma fails, tcp works, rdma wanted", func() Facts {
			f := rxeFacts("rdma")
			f.RDMAPath = &Result[Probe]{Err: refused}
			return f
		}, false, "", []string{"FAIL rdma handshake"}, []string{"fix: start the receiver on the peer"}},
		{"tcp only fails: a warning", func() Facts {
			f := rxeFacts("auto")
			f.TCPPath = &Result[Probe]{Err: refused}
			return f
		}, true, "rdma", []string{"WARN tcp handshake"}, nil},
		{"nothing works", func() Facts {
			f := rxeFacts("auto")
			f.RDMAPath, f.TCPPath = &Result[Probe]{Err: refused}, &Result[Probe]{Err: refused}
			return f
		}, false, "", []string{"FAIL rdma handshake", "FAIL tcp handshake"}, []string{"would not work: tcp handshake"}},
		{"striped over two devices", func() Facts {
			f := rxeFacts("rdma")
			f.RDMA.Device = "rxeA,rxeC"
			f.RDMAPath.Value.Info.Device, f.RDMAPath.Value.Info.QPs = "rxeA,rxeC", 2
			return f
		}, true, "rdma", []string{"OK rdma devices used"}, []string{"rxeA, rxeC, 2 queue pairs striped over them"}},
		{"several devices asked, one used", func() Facts {
			f := rxeFacts("rdma")
			f.RDMA.Device = "all"
			f.RDMAPath.Value.Info.QPs = 2
			return f
		}, true, "rdma", []string{"WARN rdma devices used"}, []string{"only rxe0 of --device all", "fix: let the receiver listen on all addresses"}},
		{"wrong key", func() Facts {
			f := rxeFacts("auto")
			bad := &conn.Error{Kind: conn.KindAuth, Err: errors.New("key proof mismatch")}
			f.RDMAPath, f.TCPPath = &Result[Probe]{Err: bad}, &Result[Probe]{Err: bad}
			return f
		}, false, "", nil, []string{"fix: give both sides the same key"}},
		{"busy", func() Facts {
			f := rxeFacts("rdma")
			f.RDMAPath = &Result[Probe]{Err: &conn.Error{Kind: conn.KindBusy, Err: errors.New("busy")}}
			return f
		}, false, "", nil, []string{"rdmasend --wait"}},
		{"memlock 8 MiB: shrunk window", func() Facts {
			f := rxeFacts("auto")
			f.Memory = Memory{Soft: 8 << 20, Hard: 8 << 20, Window: "1 MiB x 6", Locks: 6 << 20, FullWindow: "4 MiB x 8", FullLocks: 32 << 20}
			return f
		}, true, "rdma", []string{"WARN locked memory"}, []string{"soft 8 MiB, hard 8 MiB, no CAP_IPC_LOCK: the default window shrinks to 1 MiB x 6", "fix: ulimit -l unlimited"}},
		{"huge pages: the full window's count where memory is unlimited", func() Facts {
			f := rxeFacts("auto")
			f.Memory.HugePages, f.Memory.FullHugePages = 4, 17
			f.HugePages = HugePages{Total: 20, Free: 10}
			return f
		}, true, "rdma", []string{"OK huge pages"}, []string{"10 of 20 2 MiB huge pages free, the buffers would take 17", "vm.nr_hugepages=27"}},
		{"huge pages: the shrunk window's count under a limit", func() Facts {
			f := rxeFacts("auto")
			f.Memory = Memory{Soft: 8 << 20, Hard: 8 << 20, Window: "1 MiB x 6", Locks: 6 << 20, HugePages: 4, FullWindow: "4 MiB x 8", FullLocks: 32 << 20, FullHugePages: 17}
			f.HugePages = HugePages{Total: 20, Free: 10}
			return f
		}, true, "rdma", []string{"OK huge pages"}, []string{"10 of 20 2 MiB huge pages free; this side's buffers take 4"}},
		{"receiver with too little memlock", func() Facts {
			f := rxeFacts("rdma")
			f.Peer, f.Listen, f.Route = "", ":18800", nil
			f.Memory = Memory{Soft: 64 << 10, Hard: 64 << 10, TooLittle: true}
			f.RDMAPath = &Result[Probe]{Value: Probe{Addr: "0.0.0.0:18800"}}
			f.TCPPath = &Result[Probe]{Value: Probe{Addr: "[::]:18800"}}
			return f
		}, false, "", []string{"FAIL locked memory", "OK rdma listen", "OK tcp listen"}, []string{"too little for RDMA"}},
		{"cores: a 10 Gb/s port", func() Facts {
			f := rxeFacts("auto")
			f.Devices[0].Ports[0].Rate = "10 Gb/sec (1X QDR)"
			f.Pace = Pace{Cores: 2, CopyGBps: 4, HashGBps: 20}
			return f
		}, true, "rdma", []string{"OK cores"}, []string{"2; one copies 4.0 GB/s from the page cache and hashes 20.0 GB/s (XXH3): at 10 Gb/s (rxe0 port 1) a sender from a file needs at least 0.4 cores, a receiver 0.1"}},
		{"cores: too few for a 400 Gb/s port", func() Facts {
			f := rxeFacts("auto")
			f.Devices[0].Ports[0].Rate = "400 Gb/sec (4X NDR)"
			f.Pace = Pace{Cores: 2, CopyGBps: 4, HashGBps: 20}
			return f
		}, true, "rdma", []string{"WARN cores"}, []string{"needs at least 15.0 cores, a receiver 2.5", "expect about 53 Gb/s from this host"}},
		{"cores: no active port, no measurement", func() Facts {
			f := rxeFacts("auto")
			f.Devices[0].Ports[0].State = "DOWN"
			f.Pace = Pace{Cores: 2, Err: errors.New("no memfd")}
			return f
		}, true, "rdma", []string{"WARN cores"}, []string{"could not be measured (no memfd)"}},
		{"cores: the reference rate without an active port", func() Facts {
			f := rxeFacts("auto")
			f.Devices[0].Ports[0].State = "DOWN"
			f.Pace = Pace{Cores: 2, CopyGBps: 4, HashGBps: 20}
			return f
		}, true, "rdma", []string{"OK cores"}, []string{"at 100 Gb/s (no active RDMA port here) a sender from a file needs at least 3.8 cores"}},
		{"port down", func() Facts {
			f := rxeFacts("auto")
			f.Devices[0].Ports[0].State, f.Devices[0].Ports[0].PhysState = "DOWN", "Disabled"
			return f
		}, true, "rdma", []string{"WARN rxe0 port 1"}, []string{"ip link set dummy0 up"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Judge(tc.facts())
			if r.OK != tc.ok || r.Path != tc.path {
				t.Errorf("ok %v path %q, want %v %q", r.OK, r.Path, tc.ok, tc.path)
			}
			var text bytes.Buffer
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, c := range r.Checks {
				seen[string(c.Status)+" "+c.Name] = true
				if c.Status != OK && c.Fix == "" {
					t.Errorf("%s %s has no fix", c.Status, c.Name)
				}
			}
			for _, l := range tc.lines {
				if !seen[l] {
					t.Errorf("no check %q in:\n%s", l, text.String())
				}
			}
			for _, p := range tc.phrase {
				if !strings.Contains(text.String(), p) {
					t.Errorf("report lacks %q:\n%s", p, text.String())
				}
			}
			var js bytes.Buffer
			if err := r.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var back Report
			if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.OK != r.OK || len(back.Checks) != len(r.Checks) {
				t.Errorf("JSON round trip: %v, %+v", err, back)
			}
		})
	}
}

// TestMeasurePace measures this host: its cores, and copy and hash rates
// that one core of any machine this runs on reaches (0.1 to 1000 GB/s).
func TestMeasurePace(t *testing.T) {
	t.Parallel()
	p := measurePace()
	if p.Err != nil || p.Cores != runtime.NumCPU() || p.CopyGBps < 0.1 || p.CopyGBps > 1000 || p.HashGBps < 0.1 || p.HashGBps > 1000 {
		t.Errorf("%+v", p)
	}
}
