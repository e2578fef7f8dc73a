package sendrecv

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe"
)

// summary is a finished stream as -v prints it and --stats-json writes it.
type summary struct {
	Role      string       `json:"role"`
	OK        bool         `json:"ok"`
	Error     string       `json:"error,omitempty"`
	ExitCode  int          `json:"exit_code"`
	Bytes     int64        `json:"bytes"`
	Messages  int64        `json:"messages"`
	Seconds   float64      `json:"seconds"`
	MiBps     float64      `json:"mib_per_s"`
	Transport string       `json:"transport"`
	Device    string       `json:"device,omitempty"`
	Port      int          `json:"port,omitempty"`
	RDMAOp    string       `json:"rdma_op,omitempty"`
	QPs       int          `json:"qps,omitempty"`
	Write     int          `json:"write_bytes,omitempty"` // bytes per RDMA WRITE when a chunk is split into several
	Tuned     string       `json:"tuned_for,omitempty"`   // the link whose speed chose QPs and Write
	Local     string       `json:"local,omitempty"`
	Remote    string       `json:"remote,omitempty"`
	Chunk     int          `json:"chunk"`
	Depth     int          `json:"depth"`
	Pinned    int64        `json:"pinned_bytes"`
	IO        string       `json:"io,omitempty"`        // how stdin was read or stdout written (pipe.Stats.IO)
	Chain     []string     `json:"chain,omitempty"`     // rdmasend --to: the receivers after the first
	Receivers int          `json:"receivers,omitempty"` // receivers that confirmed the whole stream, with a chain
	Lost      []string     `json:"lost,omitempty"`      // with a chain: the receivers given up in mid-stream (the others went on)
	Hosts     []hostResult `json:"hosts,omitempty"`     // with a chain: each receiver's result, once all confirmed
	Integrity string       `json:"integrity,omitempty"` // xxh3, aes-gmac (keyed) or aes-256-gcm (encrypted)
	XXHash64  string       `json:"xxhash64,omitempty"`  // without a key: the stream's checksum (of each chunk's XXH3)
	Lag       *lagResult   `json:"lag,omitempty"`       // rdmarecv in a chain: how far its output fell behind
	CPU       float64      `json:"cpu_seconds"`         // user+system CPU of this process
	CPUPerGiB float64      `json:"cpu_s_per_gib"`       // CPU seconds per GiB of stream (0 for an empty stream)
}

// lagResult is how far a receiver's output fell behind the stream
// (pipe.Stats.Behind, Spilled).
type lagResult struct {
	Behind  int64 `json:"behind_bytes"`  // the most held at once
	Spilled int64 `json:"spilled_bytes"` // what went through the spill file
}

// hostResult is one receiver's result in a broadcast: each confirms only
// after the ones after it did, so the sender knows them all at once.
type hostResult struct {
	Host  string `json:"host"`
	OK    bool   `json:"ok"`
	Bytes int64  `json:"bytes"`
	// Lag is, with a key, the most the host's reports said it was behind,
	// and what it spilled (pipe.Stats.Hosts): shown only.
	Lag *lagResult `json:"lag,omitempty"`
}

// newSummary describes a stream that ended with err, after this process
// used cpu (user+system) in all.
func newSummary(role string, st pipe.Stats, err error, cpu time.Duration) summary {
	s := summary{Role: role, OK: err == nil, ExitCode: command.ExitCode(err), Bytes: st.Bytes, Messages: st.Messages,
		Seconds: st.Elapsed.Seconds(), Transport: st.Info.Transport, Device: st.Info.Device, Port: st.Info.Port,
		RDMAOp: st.Info.DataPath, QPs: st.Info.QPs, Write: st.Info.Write, Tuned: st.Info.Tuned, Local: st.Info.Local, Remote: st.Info.Remote, Chunk: st.Info.Chunk, Depth: st.Info.Depth,
		Pinned: st.Info.Pinned, IO: st.IO}
	if st.Behind > 0 {
		s.Lag = &lagResult{Behind: st.Behind, Spilled: st.Spilled}
	}
	if err != nil {
		s.Error = err.Error()
	} else {
		s.Integrity = st.Integrity
		if st.Integrity == "xxh3" {
			s.XXHash64 = fmt.Sprintf("%016x", st.Sum)
		}
	}
	s.MiBps = units.MiBps(st.Bytes, s.Seconds)
	s.CPU = cpu.Seconds()
	if st.Bytes > 0 {
		s.CPUPerGiB = s.CPU / (float64(st.Bytes) / (1 << 30))
	}
	return s
}

// line is the one-line summary -v prints.
func (s summary) line() string {
	via := s.Transport
	if s.Device != "" {
		how := s.RDMAOp
		if s.QPs > 1 {
			how += fmt.Sprintf(", %d QPs", s.QPs)
		}
		if s.Write > 0 {
			how += fmt.Sprintf(", %s writes", units.Size(int64(s.Write)))
		}
		if s.Tuned != "" {
			how += " for " + s.Tuned
		}
		via = fmt.Sprintf("%s %s port %d (%s)", s.Transport, s.Device, s.Port, how)
	}
	if s.Transport == "" {
		via = "no connection"
	}
	line := fmt.Sprintf("%d bytes in %.3f s (%.1f MiB/s) over %s %s -> %s, chunk %s x %d",
		s.Bytes, s.Seconds, s.MiBps, via, s.Local, s.Remote, units.Size(int64(s.Chunk)), s.Depth)
	if s.Pinned > 0 {
		line += ", pinned " + formatMiB(s.Pinned)
	}
	if s.IO != "" {
		line += ", " + s.IO
	}
	if s.Integrity == "aes-256-gcm" {
		line += ", encrypted"
	}
	switch {
	case len(s.Lost) > 0:
		line += fmt.Sprintf(", written by %d of %d receivers (lost in mid-stream: %s)", s.Receivers, s.Receivers+len(s.Lost), strings.Join(s.Lost, ", "))
	case s.Receivers > 1:
		line += fmt.Sprintf(", written by all %d receivers", s.Receivers)
	}
	line += fmt.Sprintf(", CPU %.2f s", s.CPU)
	if s.Bytes > 0 {
		line += fmt.Sprintf(" (%.2f s/GiB)", s.CPUPerGiB)
	}
	return line
}

// writeJSON writes the summary to path.
func (s summary) writeJSON(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--stats-json: %w", err)
	}
	return nil
}
