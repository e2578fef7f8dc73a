package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
)

// Host reports: with a key, a sender asks its receiver how far behind the
// hosts from it down the chain are (MsgAskReport, under a control credit,
// its trailer's sequence number the ask's own, from 1), and the receiver
// answers with one report, which returns that control credit:
//
//	'R' report: ask u32, count u8, count x (place u32, behind u64,
//	    spilled u64), mac[32]
//
// The first entry is the receiver's own, the others what its own
// receiver last reported, in the order of the chain; the MAC, under the
// hop's stream key, covers everything before it.
const (
	MsgAskReport byte = 'Q'
	MsgReport    byte = 'R'
)

// Sizes and bounds of a report.
const (
	reportHead  = 1 + 4 + 1 // type, ask, count
	ReportEntry = 4 + 8 + 8
	// MaxReportHosts is how many hosts one report names at most: those
	// that fit in a control message with the MAC.
	MaxReportHosts = (conn.MaxControl - reportHead - auth.MACLen) / ReportEntry
	// MaxReportLag bounds the bytes a host may say it is behind or
	// spilled: more than any stream's lag could be.
	MaxReportLag = 1 << 56
)

// HostLag is one host's entry in a report: its place in the chain, the
// bytes its output has yet to take and the bytes that went through its
// spill file.
type HostLag struct {
	Place           uint32
	Behind, Spilled int64
}

// AppendReport returns the report answering ask with hosts (at most
// MaxReportHosts of them), without its MAC.
func AppendReport(ask uint32, hosts []HostLag) []byte {
	hosts = hosts[:min(len(hosts), MaxReportHosts)]
	b := make([]byte, reportHead, reportHead+len(hosts)*ReportEntry+auth.MACLen)
	b[0] = MsgReport
	binary.LittleEndian.PutUint32(b[1:], ask)
	b[5] = byte(len(hosts))
	for _, h := range hosts {
		b = binary.LittleEndian.AppendUint32(b, h.Place)
		b = binary.LittleEndian.AppendUint64(b, uint64(h.Behind))
		b = binary.LittleEndian.AppendUint64(b, uint64(h.Spilled))
	}
	return b
}

// ParseReport splits a report into the ask it answers, its hosts, the
// bytes its MAC covers and the MAC (macLen bytes at its end: 0 without
// a key), after checking its size against the count it gives.
func ParseReport(msg []byte, macLen int) (ask uint32, hosts []HostLag, body, mac []byte, err error) {
	if len(msg) < reportHead+macLen || msg[0] != MsgReport {
		return 0, nil, nil, nil, fmt.Errorf("a report of %d bytes: too short", len(msg))
	}
	n := int(msg[5])
	if n == 0 || n > MaxReportHosts {
		return 0, nil, nil, nil, fmt.Errorf("a report of %d hosts (1 to %d)", n, MaxReportHosts)
	}
	if want := reportHead + n*ReportEntry + macLen; len(msg) != want {
		return 0, nil, nil, nil, fmt.Errorf("a report of %d hosts in %d bytes, not %d", n, len(msg), want)
	}
	body, mac = msg[:len(msg)-macLen], msg[len(msg)-macLen:]
	for e := body[reportHead:]; len(e) > 0; e = e[ReportEntry:] {
		hosts = append(hosts, HostLag{Place: binary.LittleEndian.Uint32(e),
			Behind: int64(binary.LittleEndian.Uint64(e[4:])), Spilled: int64(binary.LittleEndian.Uint64(e[12:]))})
	}
	return binary.LittleEndian.Uint32(msg[1:]), hosts, body, mac, nil
}

// CheckReport checks the hosts of a report from the receiver at place
// first, whose chain ends at place last as far as its sender knows: the
// first entry is the receiver's own, the places rise (so that each is
// there at most once) up to last, and every count is within
// MaxReportLag.
func CheckReport(hosts []HostLag, first, last uint32) error {
	if len(hosts) == 0 || hosts[0].Place != first {
		return fmt.Errorf("the report does not begin with the receiver's own place %d", first)
	}
	for i, h := range hosts {
		switch {
		case i > 0 && h.Place <= hosts[i-1].Place:
			return fmt.Errorf("place %d after place %d: the places must rise, each once", h.Place, hosts[i-1].Place)
		case h.Place > last:
			return fmt.Errorf("place %d, past the end of the chain at %d", h.Place, last)
		case h.Behind < 0 || h.Behind > MaxReportLag || h.Spilled < 0 || h.Spilled > MaxReportLag:
			return fmt.Errorf("place %d is %d bytes behind with %d spilled: out of range", h.Place, h.Behind, h.Spilled)
		}
	}
	return nil
}
