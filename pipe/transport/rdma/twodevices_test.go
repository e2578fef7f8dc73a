package rdma

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestTwoDevices stripes streams over two devices on each side, in the
// SoftRoCE VM with both wires of test/softroce/wire.sh (`wire.sh up`, then
// `wire.sh second`): rxeA (10.0.9.1) to rxeB (10.0.9.2) over vethA, and
// rxeC (10.0.10.1) to rxeD (10.0.10.2) over vethC. The receiver listens on
// the wildcard address; the sender dials rxeB's address and learns rxeD's
// from the grant. Every message must arrive exact and in order, and each
// wire, and each sending device, must have carried its lanes' share of the
// stream.
func TestTwoDevices(t *testing.T) {
	for _, dev := range []string{"rxeA", "rxeB", "rxeC", "rxeD"} {
		if _, err := os.Stat(SysfsRoot + "/" + dev); err != nil {
			t.Skip("no second wire (rxeA to rxeD): run wire.sh up and wire.sh second in the SoftRoCE VM first")
		}
	}
	p := conn.NewParams(16384, 4)
	cases := []struct {
		name, sender, receiver string
		qps                    int
		wantSnd, wantRcv       string // the devices Info names ("" for any)
		wantQPs                int
	}{
		{"two listed on each side", "rxeA,rxeC", "rxeB,rxeD", 0, "rxeA,rxeC", "rxeB,rxeD", 2},
		{"4 QPs, the receiver offers every device", "rxeA,rxeC", "all", 4, "rxeA,rxeC", "rxeB,rxeD", 4},
		{"all", "all", "all", 0, "", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := timeout(t, 30*time.Second)
			l, err := Listen(ctx, ":0", p, Options{Device: tc.receiver, GIDIndex: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, port, _ := net.SplitHostPort(l.Addr())
			d := Dialer{Options: Options{Device: tc.sender, GIDIndex: -1, QPs: tc.qps}}
			snd, rcv, dialErr, acceptErr := dialAcceptAt(ctx, l, d, net.JoinHostPort(hostB, port), p)
			if dialErr != nil || acceptErr != nil {
				t.Fatalf("Dial: %v; Accept: %v", dialErr, acceptErr)
			}
			defer snd.Close()
			defer rcv.Close()
			si, ri := snd.Info(), rcv.Info()
			t.Logf("sender: %s over %d QPs; receiver: %s", si.Device, si.QPs, ri.Device)
			devs := strings.Split(si.Device, ",")
			switch {
			case tc.wantSnd != "" && (si.Device != tc.wantSnd || ri.Device != tc.wantRcv):
				t.Fatalf("devices %s to %s, want %s to %s", si.Device, ri.Device, tc.wantSnd, tc.wantRcv)
			case tc.wantQPs != 0 && (si.QPs != tc.wantQPs || ri.QPs != tc.wantQPs):
				t.Fatalf("%d and %d QPs, want %d", si.QPs, ri.QPs, tc.wantQPs)
			case len(devs) < 2 || devs[0] != "rxeA" || !strings.Contains(si.Device, "rxeC"):
				t.Fatalf("sender's devices %s: want rxeA first, and rxeC", si.Device)
			}

			counters := []string{"/sys/class/net/vethA/statistics/tx_bytes", "/sys/class/net/vethC/statistics/tx_bytes"}
			for _, dev := range []string{"rxeA", "rxeC"} {
				if c := SysfsRoot + "/" + dev + "/ports/1/hw_counters/sent_pkts"; readCount(t, c) >= 0 {
					counters = append(counters, c)
				}
			}
			before := make([]int64, len(counters))
			for i, c := range counters {
				before[i] = readCount(t, c)
			}
			const count = 1024
			size := p.Chunk
			stream(t, snd, rcv, count, func(int) int { return size })
			// Lane k goes to device k mod len(devs) of the sender: each
			// device carries at least its lanes' share of the bytes, in
			// packets of at most 4096 bytes.
			share := int64(count * size / si.QPs * (si.QPs / len(devs)))
			for i, c := range counters {
				got, want := readCount(t, c)-before[i], share
				if strings.HasSuffix(c, "sent_pkts") {
					want = share / 4096
				}
				t.Logf("%s: +%d", c, got)
				if got < want {
					t.Errorf("%s grew by %d, want at least %d: the device did not carry its lanes", c, got, want)
				}
			}
		})
	}
}

// readCount reads a counter from sysfs, -1 if there is no such file.
func readCount(t *testing.T, path string) int64 {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return -1
	}
	n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || perr != nil {
		t.Fatalf("read %s: %v %v", path, err, perr)
	}
	return n
}
