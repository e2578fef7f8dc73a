package sendrecv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Bench mode: rdmasend --bench sends a synthetic stream at each message
// size from 1 B to BenchMaxChunk in powers of two, one connection per size,
// and reports throughput, message rate and the sender's CPU time per GB.
// The receiver is `rdmarecv --bench` (or any rdmarecv -k whose output goes
// nowhere and whose --chunk-size is large enough).

// BenchMaxChunk is the largest message size the sweep measures.
const BenchMaxChunk = 8 << 20

// benchRow is one message size's measurement.
type benchRow struct {
	Size       int     `json:"size"`  // message size asked for
	Chunk      int     `json:"chunk"` // negotiated message size (smaller if the receiver's --chunk-size is)
	Bytes      int64   `json:"bytes"` // measured bytes, after the warm-up
	Seconds    float64 `json:"seconds"`
	MiBps      float64 `json:"mib_per_s"`
	Gbps       float64 `json:"gbit_per_s"` // the link's unit: 10^9 bits a second
	MsgsPerSec float64 `json:"messages_per_s"`
	CPUPerGiB  float64 `json:"cpu_s_per_gib"` // sender user+system CPU seconds per GiB
}

// benchReport is what --bench-json writes.
type benchReport struct {
	Transport string     `json:"transport"`
	Device    string     `json:"device,omitempty"`
	Remote    string     `json:"remote"`
	Depth     int        `json:"depth"`
	Warmup    float64    `json:"warmup_s"`
	Duration  float64    `json:"duration_s"`
	Rows      []benchRow `json:"rows"`
}

// bench runs the sweep against addr and prints a table on out.
func bench(ctx context.Context, d conn.Dialer, addr string, o options, wait, perSize time.Duration, jsonPath string, out io.Writer) error {
	warmup := perSize / 5
	rep := benchReport{Remote: addr, Depth: o.params.Depth, Warmup: warmup.Seconds(), Duration: perSize.Seconds()}
	fmt.Fprintf(out, "%10s %10s %10s %9s %12s %12s\n", "size", "chunk", "MiB/s", "Gbit/s", "msg/s", "CPU s/GiB")
	for size := 1; size <= BenchMaxChunk; size *= 2 {
		p := o.params
		p.Chunk = size
		row, info, err := benchOne(ctx, d, addr, p, o.send, wait, warmup, perSize)
		if err != nil {
			return fmt.Errorf("bench at %s messages: %w", units.Size(int64(size)), err)
		}
		row.Size = size
		rep.Transport, rep.Device, rep.Depth = info.Transport, info.Device, info.Depth
		rep.Rows = append(rep.Rows, row)
		fmt.Fprintf(out, "%10s %10s %10.1f %9.3f %12.0f %12.3f\n", units.Size(int64(size)), units.Size(int64(row.Chunk)),
			row.MiBps, row.Gbps, row.MsgsPerSec, row.CPUPerGiB)
	}
	fmt.Fprintf(out, "over %s to %s, depth %d, %v per size after a %v warm-up\n", rep.Transport, addr, rep.Depth, perSize, warmup)
	if jsonPath == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return conn.Errorf(conn.KindUsage, "", "--bench-json: %v", err)
	}
	return nil
}

// benchOne measures one message size on a fresh connection, waiting up to
// wait for the receiver to be up and free.
func benchOne(ctx context.Context, d conn.Dialer, addr string, p conn.Params, cfg pipe.SendConfig, wait, warmup, measure time.Duration) (benchRow, conn.Info, error) {
	src := &benchSource{warmup: warmup, measure: measure}
	st, _, err := sendWithRetry(ctx, d, addr, p, wait, src, cfg)
	if err != nil {
		return benchRow{}, st.Info, err
	}
	secs := time.Since(src.startAt).Seconds()
	row := benchRow{Chunk: st.Info.Chunk, Bytes: st.Bytes - src.warmBytes, Seconds: secs}
	row.MiBps = units.MiBps(row.Bytes, secs)
	row.Gbps = float64(row.Bytes) * 8 / 1e9 / secs
	row.MsgsPerSec = float64(st.Messages-src.warmMsgs) / secs
	if row.Bytes > 0 {
		row.CPUPerGiB = (cpuTime() - src.startCPU).Seconds() / (float64(row.Bytes) / (1 << 30))
	}
	return row, st.Info, nil
}

// benchSource is an endless input that costs nothing to read: each Read
// hands over the buffer as it is (the payload's content does not matter
// for throughput). It notes when the warm-up ends and ends the stream when
// the measurement time is up.
type benchSource struct {
	warmup, measure time.Duration
	began, startAt  time.Time
	startCPU        time.Duration
	bytes, msgs     int64
	warmBytes       int64
	warmMsgs        int64
}

func (b *benchSource) Read(p []byte) (int, error) {
	now := time.Now()
	switch {
	case b.began.IsZero():
		b.began = now
	case b.startAt.IsZero() && now.Sub(b.began) >= b.warmup:
		b.startAt, b.startCPU, b.warmBytes, b.warmMsgs = now, cpuTime(), b.bytes, b.msgs
	case !b.startAt.IsZero() && now.Sub(b.startAt) >= b.measure:
		return 0, io.EOF
	}
	b.bytes += int64(len(p))
	b.msgs++
	return len(p), nil
}

// cpuTime returns this process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
