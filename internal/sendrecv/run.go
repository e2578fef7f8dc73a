// Package sendrecv is the rdmasend and rdmarecv commands: their flags and
// help, the transport and window they choose, key loading, the receiver's
// server and relay set-up, --bench and --check, and the reports a stream
// ends with. What they share with rdmacp is in package command.
package sendrecv

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// exitCodesHelp is the exit-code table of both commands' man pages.
const exitCodesHelp = `EXIT CODES:
   0  success: every byte was delivered and written
   1  internal error
   2  usage error (bad flags or arguments)
   3  setup failure: cannot connect or listen, receiver busy, memory registration (memlock)
   4  stream aborted: peer aborted or lost, interrupted, input or output failed
   5  integrity failure: length, checksum or sequence mismatch
   6  authentication failure: wrong or missing key
   7  RDMA requested but not available
   8  rdmasend --to with a key: receivers lost in mid-stream (named), every other one wrote it all`

// hint is what the user of command name can do about err, in the
// command's own flags (the library's errors say what happened, not which
// flag to use), or "".
func hint(name string, err error) string {
	if name != "rdmasend" && name != "rdmarecv" {
		return ""
	}
	text := err.Error()
	switch {
	case conn.KindOf(err) == conn.KindAuth:
		return "both sides need the same key: --key-file FILE (or RDMAPIPE_KEY) on each"
	case conn.KindOf(err) == conn.KindBusy && name == "rdmasend":
		return "rdmasend --wait DURATION retries while the receiver is busy"
	case strings.Contains(text, "does not relay") && name == "rdmasend":
		return "a receiver relays a broadcast only when started to: rdmarecv --relay-allow HOSTS (the hosts after it), or rdmarecv --relay with a key"
	case strings.Contains(text, "no word from the"):
		return "--timeout DURATION sets how long a silent peer is waited for"
	}
	return ""
}

// namedLost says whether lost, a name in pipe.Stats.Lost, names host:
// as it is, or cut as the engine cuts long names in its messages.
func namedLost(host, lost string) bool {
	return host == lost || len(host) > 64 && lost == host[:61]+"..."
}

// firstReceiver is rdmasend's first receiver: its address as given, and
// as the engine names it in pipe.Stats.Lost (its connection's remote
// address, see pipe.SendConfig.Repair).
type firstReceiver struct {
	addr, remote string
}

// hostResults is each receiver's result in a broadcast to first and then
// chain that streamed st: the first is lost when named by either of its
// names, another when named by its own.
func hostResults(first firstReceiver, chain []string, st pipe.Stats) []hostResult {
	var rs []hostResult
	for i, h := range append([]string{first.addr}, chain...) {
		lost := func(l string) bool { return namedLost(h, l) || i == 0 && namedLost(first.remote, l) }
		r := hostResult{Host: h, OK: !slices.ContainsFunc(st.Lost, lost)}
		if r.OK {
			r.Bytes = st.Bytes
		}
		if j := slices.IndexFunc(st.Hosts, func(l pipe.HostLag) bool { return l.Place == i+1 }); j >= 0 {
			r.Lag = &lagResult{Behind: st.Hosts[j].Behind, Spilled: st.Hosts[j].Spilled}
		}
		rs = append(rs, r)
	}
	return rs
}

// finish prints the -v summary and writes --stats-json for a stream that
// ended with err (a sender's to first, then o.send.Chain), and returns err
// (or the stats file's error).
func finish(o options, role string, first firstReceiver, st pipe.Stats, err error) error {
	s := newSummary(role, st, err, cpuTime())
	if len(o.send.Chain) > 0 {
		s.Chain = o.send.Chain
		if err == nil {
			s.Receivers, s.Lost = st.Receivers, st.Lost
			s.Hosts = hostResults(first, o.send.Chain, st)
		}
		if err == nil && len(st.Lost) > 0 {
			err = &command.Partial{Failed: st.Lost, Hosts: 1 + len(o.send.Chain)}
			s.OK, s.ExitCode, s.Error = false, command.ExitPartial, err.Error()
		}
	}
	if o.verbose && (err == nil || len(s.Lost) > 0) {
		fmt.Fprintf(os.Stderr, "rdma%s: %s\n", role, s.line())
	}
	if o.statsJSON != "" {
		if werr := s.writeJSON(o.statsJSON); werr != nil && err == nil {
			return conn.Errorf(conn.KindUsage, "", "%v", werr)
		}
	}
	return err
}
