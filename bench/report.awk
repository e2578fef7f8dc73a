# bench/report.awk - turns the raw measurements of bench/run.sh (tab-separated, one line
# per run; columns as written by record() in bench/lib.sh) into markdown tables: one per
# environment, medians of the successful runs, then the project's targets with pass/miss.
# usage: awk -F'\t' -v host_size=1G -v vm_size=256M -f bench/report.awk host.tsv vm.tsv
#
# columns: 1 env, 2 tool, 3 run, 4 ok, 5 bytes, 6 wall s, 7 send CPU s, 8 send RSS KiB,
# 9 recv CPU s, 10 recv RSS KiB, 11 tool's own MB/s, 12 send VmPin KiB, 13 recv VmPin,
# 14 send VmLck, 15 recv VmLck, 16 chunk (ib_send_bw: message size), 17 depth,
# 18 messages, 19 send pinned KiB as rdmasend reports it (--stats-json pinned_bytes),
# 20 recv pinned KiB (rdmarecv's), 21 rdma_op, 22 note ("-" = none)
#
# Two comparisons of a tool A with a peer B:
#   wall/wall  A's bytes / wall time over B's: everything a user waits for (process start,
#              connection set-up, data, teardown); every tool has it;
#   own/own    the rates the tools report themselves, data phase only (rdmasend's
#              --stats-json, ib_send_bw's BW average, rcopy's own figure); only for peers
#              that report one.
# A target's verdict uses own/own when both tools report their own rate, wall/wall
# otherwise; the other comparison is printed beside it.

function add(k, m, x) { if (x == "-" || x == "") return; n[k, m]++; v[k, m, n[k, m]] = x + 0 }

# median of the values of metric m for key k; "" when there are none
function med(k, m,    c, i, j, t, a) {
  c = n[k, m] + 0
  if (c == 0) return ""
  for (i = 1; i <= c; i++) a[i] = v[k, m, i]
  for (i = 2; i <= c; i++) {   # insertion sort: a handful of values
    t = a[i]
    for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
    a[j + 1] = t
  }
  return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
}

function f(x, fmt) { return (x == "") ? "-" : sprintf(fmt, x) }
function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "" : a / b }
function mib(k) { return (k == "") ? "" : k / 1024 }
function kib(b) { return (b == "") ? "" : b / 1024 }
function verdict(ok) { return ok ? "pass" : "**miss**" }
function has(e, t) { return ((e SUBSEP t) in runs) }
function wall(e, t) { return med(e SUBSEP t, "mbps") }
function own(e, t) { return med(e SUBSEP t, "self") }

# "1.23x (45.6 vs 37.1 MB/s)" for rates a and b, "-" without both
function rx(a, b) { return (ratio(a, b) == "") ? "-" : sprintf("%.2fx (%.1f vs %.1f MB/s)", a / b, a, b) }

# the comparison a target uses for tools a and b in environment e: own or wall
function mode(e, a, b) { return (own(e, a) != "" && own(e, b) != "") ? "own" : "wall" }
function primary(e, a, b) { return (mode(e, a, b) == "own") ? ratio(own(e, a), own(e, b)) : ratio(wall(e, a), wall(e, b)) }

# "0.68x own/own (54.9 vs 80.7 MB/s); wall/wall 0.45x (36.3 vs 49.2 MB/s)": the primary
# comparison first, the other beside it (when both tools have it)
function both(e, a, b,    s) {
  if (mode(e, a, b) == "own") {
    s = "own/own " rx(own(e, a), own(e, b))
    if (ratio(wall(e, a), wall(e, b)) != "") s = s "; wall/wall " rx(wall(e, a), wall(e, b))
  } else {
    s = "wall/wall " rx(wall(e, a), wall(e, b))
  }
  return s
}

# the label of a tool's row; ib_send_bw's says its message size (from the chunk column)
function label(e, t,    c, s) {
  if (t ~ /^ib_send_bw/) {
    c = med(e SUBSEP t, "chunk")
    s = (c == "") ? "?" : sprintf("%g KiB", c / 1024)
    return "ib_send_bw -R" ((t ~ /^ib_send_bw-e/) ? " -e" : "") ", " s " msgs, " ((t ~ /^ib_send_bw-e/) ? "CQ events" : "polling")
  }
  return (t in lab) ? lab[t] : t
}

BEGIN {
  lab["pipe"] = "pipe alone: `head \\| cat` (ceiling for pipe-fed tools)"
  lab["rdmapipe"] = "**rdmapipe** `head \\| rdmasend` -> `rdmarecv > /dev/null`"
  lab["rdmapipe-wc"] = "**rdmapipe** `head \\| rdmasend` -> `rdmarecv \\| wc -c`"
  lab["rdmapipe-file"] = "**rdmapipe** `rdmasend < file` (tmpfs) -> `rdmarecv > /dev/null`"
  lab["rdmapipe-f2f"] = "**rdmapipe** `rdmasend < file` -> `rdmarecv > file` (tmpfs both)"
  lab["rdmapipe-busy"] = "rdmapipe `--busy-poll` both sides, `> /dev/null`"
  lab["rdmapipe-send"] = "rdmapipe `--rdma-op send` both sides (SEND data path), `> /dev/null`"
  lab["rdmapipe-64k"] = "rdmapipe `--chunk-size 64K` both sides, `> /dev/null`"
  lab["rdmapipe-before"] = "rdmapipe of `BEFORE_BIN` (an earlier build), `head \\| rdmasend` -> `rdmarecv > /dev/null`"
  lab["socat"] = "socat -u, `> /dev/null`"
  lab["socat-wc"] = "socat -u, `\\| wc -c`"
  lab["nc"] = "nc -N -> nc -d -l, `> /dev/null`"
  lab["nc-f2f"] = "nc -N `< file` -> nc -d -l `> file` (tmpfs both)"
  lab["mbuffer"] = "mbuffer -O -> mbuffer -I `-o /dev/null` (defaults)"
  lab["rcopy"] = "rcopy (rsockets; tmpfs file -> tmpfs file)"
  GiB = 1073741824
  # the rdmapipe rows that run with default settings (the RSS target covers them all)
  deflt["rdmapipe"] = deflt["rdmapipe-wc"] = deflt["rdmapipe-file"] = deflt["rdmapipe-f2f"] = 1
  # file -> file peers of rdmapipe-f2f
  filepeer["rcopy"] = filepeer["nc-f2f"] = 1
}

{
  e = $1; t = $2; k = e SUBSEP t
  if ($3 == 0) {   # the warm-up: only its failures are reported
    if ($4 != 1) warmfail[e, t] = $22
    next
  }
  if (!((e, t) in runs)) { order[e, ++ntools[e]] = t }
  runs[e, t]++
  if ($4 != 1) {
    if (!((e, t) in fail)) fail[e, t] = "run " $3 ": " $22
    next
  }
  okruns[e, t]++
  b = $5 + 0
  add(k, "bytes", b)
  if ($6 + 0 > 0) { add(k, "mbps", b / $6 / 1e6); round[k, "mbps", $3] = b / $6 / 1e6 }
  add(k, "self", $11)
  if ($7 != "-") add(k, "scpu", $7 / (b / GiB))
  if ($9 != "-") add(k, "rcpu", $9 / (b / GiB))
  if ($7 != "-" && $9 != "-") { add(k, "tcpu", ($7 + $9) / (b / GiB)); round[k, "tcpu", $3] = ($7 + $9) / (b / GiB) }
  add(k, "srss", $8); add(k, "rrss", $10)
  add(k, "spin", $12); add(k, "rpin", $13); add(k, "slck", $14); add(k, "rlck", $15)
  add(k, "chunk", $16); add(k, "depth", $17)
  add(k, "spinned", $19); add(k, "rpinned", $20)
  if ($21 != "-" && $21 != "") op[e, t] = $21
  if ($18 != "-" && $18 + 0 > 0) { add(k, "msgs_gib", $18 / (b / GiB)); add(k, "avgmsg", b / $18) }
}

# the per-run columns both tables share
function common(e, t,    k) {
  k = e SUBSEP t
  return sprintf(" %s | %s | %s | %s | %s |", f(med(k, "scpu"), "%.2f"), f(med(k, "rcpu"), "%.2f"), f(med(k, "tcpu"), "%.2f"),
    f(mib(med(k, "srss")), "%.1f"), f(mib(med(k, "rrss")), "%.1f"))
}

function okcol(e, t) { return (okruns[e, t] + 0) "/" runs[e, t] }

# rdmapipe's negotiated parameters, message sizes and pinned/locked memory, as a list
function details(e, t,    k, c, d) {
  k = e SUBSEP t
  if (!(okruns[e, t] + 0)) return   # no successful run: its failure is listed
  c = med(k, "chunk"); d = med(k, "depth")
  printf "- %s: chunk %s x depth %s (from `--stats-json`)%s; %s messages per GiB, %s KiB per message on average",
    t, f(kib(c), "%g KiB"), f(d, "%d"), ((e, t) in op) ? ", data path " op[e, t] : "", f(med(k, "msgs_gib"), "%.0f"), f(kib(med(k, "avgmsg")), "%.0f")
  printf "; pinned as reported (`-v`) send %s / recv %s KiB, VmPin peak (/proc) send %s / recv %s KiB, VmLck %s / %s KiB\n",
    f(med(k, "spinned"), "%d"), f(med(k, "rpinned"), "%d"), f(med(k, "spin"), "%d"), f(med(k, "rpin"), "%d"), f(med(k, "slck"), "%d"), f(med(k, "rlck"), "%d")
}

function failures(e,    i, t) {
  for (i = 1; i <= ntools[e]; i++) {
    t = order[e, i]
    if ((e, t) in fail) printf "- failed runs of %s (%d of %d; the first one): %s\n", t, runs[e, t] - okruns[e, t], runs[e, t], fail[e, t]
    if ((e, t) in warmfail) printf "- the warm-up run of %s (8 MiB, not in the medians) failed: %s\n", t, warmfail[e, t]
  }
}

function host_table(   i, t, peer, e) {
  e = "host"
  printf "## 1. Host: TCP loopback (127.0.0.1), %s per run\n\n", host_size
  print "| tool | runs ok | MB/s (wall) | MB/s (own) | this / socat | this / nc | send CPU s/GiB | recv CPU s/GiB | both CPU s/GiB | send peak RSS MiB | recv peak RSS MiB |"
  print "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for (i = 1; i <= ntools[e]; i++) {
    t = order[e, i]
    peer = (t ~ /-wc$/ && has(e, "socat-wc")) ? "socat-wc" : "socat"
    printf "| %s | %s | %s | %s | %s | %s |%s\n", label(e, t), okcol(e, t), f(wall(e, t), "%.1f"), f(own(e, t), "%.1f"),
      (t == "pipe") ? "-" : f(ratio(wall(e, t), wall(e, peer)), "%.2f"), (t == "pipe") ? "-" : f(ratio(wall(e, t), wall(e, "nc")), "%.2f"), common(e, t)
  }
  print ""
  print "- rdmapipe runs `--transport tcp`. The ratios are wall/wall (no peer here reports its own rate); `this / socat` compares with"
  print "  socat writing to the same sink (`> /dev/null` or `| wc -c`). MB/s (own): rdmasend's `--stats-json` rate (data phase only)."
  print "- rdmapipe-file reads a regular file in /dev/shm (tmpfs: page cache copies, no disk). mbuffer runs with its defaults (4 MiB"
  print "  blocks, a buffer of 2% of RAM: its RSS counts the part it touched)."
  print "- both CPU: send + receive CPU of each run (median). The pipe row's send columns are `head -c` itself (it feeds every pipe-fed"
  print "  tool and is in no other row's CPU), its receive columns `cat`."
  details(e, "rdmapipe")
  failures(e)
  print ""
}

function vm_table(   i, t, e) {
  e = "vm"
  printf "## 2. SoftRoCE VM: rxe0, both ends on 10.0.3.1, %s per run\n\n", vm_size
  print "| tool | runs ok | MB/s (wall) | MB/s (own) | rdmapipe / this, wall/wall | rdmapipe / this, own/own | send CPU s/GiB | recv CPU s/GiB | both CPU s/GiB | send peak RSS MiB | recv peak RSS MiB |"
  print "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for (i = 1; i <= ntools[e]; i++) {
    t = order[e, i]
    printf "| %s | %s | %s | %s | %s | %s |%s\n", label(e, t), okcol(e, t), f(wall(e, t), "%.1f"), f(own(e, t), "%.1f"),
      (t == "rdmapipe") ? "1.00" : (t == "pipe") ? "-" : f(ratio(wall(e, "rdmapipe"), wall(e, t)), "%.2f"),
      (t == "rdmapipe") ? "1.00" : f(ratio(own(e, "rdmapipe"), own(e, t)), "%.2f"), common(e, t)
  }
  print ""
  print "- rdmapipe runs `--transport rdma` with its defaults (event-driven completions). `rdmapipe / this`: the pipe -> pipe rdmapipe row"
  print "  (`> /dev/null`) over this row, by wall-clock rates (wall/wall) and by the rates the tools report themselves (own/own)."
  print "- MB/s (own), data phase only: rdmasend's `--stats-json` rate (end of handshake to end of stream), ib_send_bw's BW average,"
  print "  rcopy's own figure (first byte sent to the server's acknowledgement); MiB and Gb/s converted to MB/s. MB/s (wall) adds process"
  print "  start and connection set-up: ~1 s under TCG for every tool, a large share of a short run."
  print "- ib_send_bw moves the same bytes as VM_SIZE / message size messages from one registered buffer (no pipe, no copy); rcopy"
  print "  mmaps a tmpfs file (its RSS includes that mapping) and writes one; socat and nc run over the guest's kernel TCP on the same"
  print "  dummy interface. Pipe-fed tools also pay for `head -c` on the same 2 vCPUs: the pipe row's send CPU. Files are in tmpfs."
  print "- In the VM, rxe's kernel work lands on whichever process the softirq interrupts: the send/recv CPU split is rough, the total is not."
  details(e, "rdmapipe")
  details(e, "rdmapipe-f2f")
  details(e, "rdmapipe-send")
  details(e, "rdmapipe-64k")
  details(e, "rdmapipe-busy")
  failures(e)
  print ""
}

# target ROW CMP MEASURED OK: one line of the targets table (OK: 1 pass, 0 miss, -1 no data,
# 2 for reference only)
function target(row, cmp, measured, ok) {
  printf "| %s | %s | %s | %s |\n", row, cmp, measured, (ok == 2) ? "info" : (ok < 0) ? "no data" : verdict(ok)
}

# ratio_target ROW E A B WANT [INFO]: A >= WANT x B by the primary comparison
function ratio_target(row, e, a, b, want, info,    r) {
  if (!has(e, a) || !has(e, b)) {
    if (!info) target(row, "-", "not measured: " a " and " b " must both be in the tool list", -1)
    return
  }
  r = primary(e, a, b)
  target(row, mode(e, a, b) "/" mode(e, a, b), both(e, a, b), info ? 2 : (r == "") ? -1 : (r >= want))
}

# paired(E, A, B, M): the median over the rounds where both A and B succeeded of A's
# metric M over B's in that round (the tools take turns within a round); "" without one
function paired(e, a, b, m,    r, ka, kb, key) {
  ka = e SUBSEP a; kb = e SUBSEP b; key = "paired" SUBSEP e SUBSEP a SUBSEP b SUBSEP m
  delete n[key, "r"]
  for (r = 1; r <= runs[e, a]; r++)
    if (((ka, m, r) in round) && ((kb, m, r) in round) && round[kb, m, r] > 0) add(key, "r", round[ka, m, r] / round[kb, m, r])
  return med(key, "r")
}

# paired_target ROW E A B WANT [INFO]: the median of the paired rounds' wall rates of A
# over B >= WANT, and A's CPU per byte (both sides) over B's beside it
function paired_target(row, e, a, b, want, info,    r, c) {
  if (!has(e, a) || !has(e, b)) {
    if (!info) target(row, "-", "not measured: " a " and " b " must both be in the tool list", -1)
    return
  }
  r = paired(e, a, b, "mbps"); c = paired(e, a, b, "tcpu")
  target(row, "wall/wall, paired", sprintf("%s; CPU per byte, both sides, %s (ratios of medians: %s)", f(r, "%.2fx"), f(c, "%.2fx"), both(e, a, b)),
    info ? 2 : (r == "") ? -1 : (r >= want))
}

# cpu_target ROW E A B: A's CPU per byte, both sides, at most B's (median of paired rounds)
function cpu_target(row, e, a, b,    c) {
  if (!has(e, a) || !has(e, b)) return
  c = paired(e, a, b, "tcpu")
  target(row, "CPU s/GiB, paired", sprintf("%s (medians %s vs %s s/GiB)", f(c, "%.2fx"), f(med(e SUBSEP a, "tcpu"), "%.2f"), f(med(e SUBSEP b, "tcpu"), "%.2f")),
    (c == "") ? -1 : (c <= 1))
}

# the largest median peak RSS of the default-settings rdmapipe rows, per side
function rss_target(e, name,    i, t, s, r, x, ws, wr) {
  s = r = ""
  for (i = 1; i <= ntools[e]; i++) {
    t = order[e, i]
    if (!(t in deflt)) continue
    x = mib(med(e SUBSEP t, "srss")); if (x != "" && (s == "" || x > s)) { s = x; ws = t }
    x = mib(med(e SUBSEP t, "rrss")); if (x != "" && (r == "" || x > r)) { r = x; wr = t }
  }
  target(name ": rdmapipe peak RSS <= 64 MiB per side, default settings (largest over the default-settings rows)", "-",
    sprintf("send %s MiB (%s), recv %s MiB (%s)", f(s, "%.1f"), ws, f(r, "%.1f"), wr), (s == "" || r == "") ? -1 : (s <= 64 && r <= 64))
}

# pinned memory of one rdmapipe row: VmPin while it runs (/proc) against what rdmasend and
# rdmarecv say they pinned (-v, --stats-json pinned_bytes), which should be chunk x depth
# (sender) and about chunk x (depth + 1) (receiver). Without pinned_bytes (an older binary)
# those two products stand in for it. Pass: VmPin within 64 KiB above the reported figure
# (control and credit buffers) on both sides.
function pin_target(e, t, name,    k, c, d, sv, rv, sp, rp, ok, src) {
  if (!has(e, t)) return
  k = e SUBSEP t
  c = med(k, "chunk"); d = med(k, "depth"); sp = med(k, "spin"); rp = med(k, "rpin")
  sv = med(k, "spinned"); rv = med(k, "rpinned"); src = "-v"
  if ((sv == "" || rv == "") && c != "" && d != "") { sv = c * d / 1024; rv = c * (d + 1) / 1024; src = "chunk x depth (+1 recv)" }
  ok = (sv == "" || rv == "" || sp == "" || rp == "") ? -1 : (sp >= sv && sp <= sv + 64 && rp >= rv && rp <= rv + 64)
  target(name ": pinned memory = what " t " says (" src "), per side", "VmPin vs report",
    sprintf("chunk %s x depth %s; send: says %s KiB (%s chunks), VmPin %s KiB; recv: says %s KiB (%s chunks), VmPin %s KiB",
      f(kib(c), "%g KiB"), f(d, "%d"), f(sv, "%d"), f((c == "" || sv == "") ? "" : sv * 1024 / c, "%.2f"), f(sp, "%d"),
      f(rv, "%d"), f((c == "" || rv == "") ? "" : rv * 1024 / c, "%.2f"), f(rp, "%d")), ok)
}

# rdmapipe-f2f against the best file -> file peer: each peer by its primary comparison; the
# verdict is the lowest ratio, i.e. against the peer that did best
function file_target(e,    i, t, r, worst, s, any) {
  if (!has(e, "rdmapipe-f2f")) return
  worst = ""; s = ""; any = 0
  for (i = 1; i <= ntools[e]; i++) {
    t = order[e, i]
    if (!(t in filepeer)) continue
    any = 1
    r = primary(e, "rdmapipe-f2f", t)
    s = s ((s == "") ? "" : "<br>") "vs " t ": " both(e, "rdmapipe-f2f", t)
    if (r != "" && (worst == "" || r < worst)) worst = r
  }
  if (!any) return
  target("VM: rdmapipe file -> file >= 1.0x the best file -> file peer (" ((has(e, "nc-f2f")) ? "rcopy, nc" : "rcopy") "; tmpfs both ends, size checked)",
    "per peer: own/own where both report a rate, else wall/wall; verdict on the lowest", s, (worst == "") ? -1 : (worst >= 1.0))
}

function targets(   e, c, ic, msgnote) {
  print "## 3. Targets"
  print ""
  print "Comparison: **own/own** = the rates the two tools report themselves (data phase only); **wall/wall** = bytes over wall time,"
  print "sender start to both sides' exit (what a user waits for). A verdict uses own/own when both tools report their own rate, else"
  print "wall/wall; the other comparison is printed beside it. Rates are medians over the runs of one boot / one invocation."
  print ""
  print "| target | comparison (verdict) | measured (medians) | result |"
  print "| --- | --- | --- | --- |"
  e = "vm"
  if (has(e, "rdmapipe")) {
    c = med(e SUBSEP "rdmapipe", "chunk"); ic = med(e SUBSEP "ib_send_bw-e", "chunk")
    msgnote = (c == "" || ic == "") ? "" : (c == ic) ? sprintf(" (both %g KiB)", c / 1024) : sprintf(" (**sizes differ**: chunk %g KiB, ib_send_bw %g KiB)", c / 1024, ic / 1024)
    ratio_target("VM: rdmapipe pipe -> pipe >= 0.9x `ib_send_bw -R -e` at the same message size" msgnote, e, "rdmapipe", "ib_send_bw-e", 0.9)
    ratio_target("VM: rdmapipe pipe -> pipe >= 1.25x rcopy", e, "rdmapipe", "rcopy", 1.25)
    ratio_target("VM: rdmapipe pipe -> pipe >= 1.25x socat (guest kernel TCP)", e, "rdmapipe", "socat", 1.25)
    ratio_target("VM: rdmapipe pipe -> pipe >= 1.0x nc (guest kernel TCP; rxe itself may be the limit: see ib_send_bw's wall rate)", e, "rdmapipe", "nc", 1.0)
    file_target(e)
    ratio_target("VM, for reference: rdmapipe vs ib_send_bw -R polling", e, "rdmapipe", "ib_send_bw", 0, 1)
    ratio_target("VM, for reference: rxe's own ceiling: ib_send_bw -R -e vs nc (TCP)", e, "ib_send_bw-e", "nc", 0, 1)
    ratio_target("VM, for reference: rdmapipe --busy-poll vs ib_send_bw polling", e, "rdmapipe-busy", "ib_send_bw", 0, 1)
    ratio_target("VM, for reference: file input (`rdmasend < file`) vs pipe input", e, "rdmapipe-file", "rdmapipe", 0, 1)
    ratio_target("VM, for reference: `--rdma-op send` (SEND) vs the default data path", e, "rdmapipe-send", "rdmapipe", 0, 1)
    ratio_target("VM, for reference: `--chunk-size 64K` vs the default chunk", e, "rdmapipe-64k", "rdmapipe", 0, 1)
    ratio_target("VM, for reference: `--chunk-size 64K` vs ib_send_bw -R -e at 64 KiB", e, "rdmapipe-64k", "ib_send_bw-e-64k", 0, 1)
  }
  e = "host"
  if (has(e, "rdmapipe")) {
    ratio_target("host: rdmapipe --transport tcp >= 2.5x socat (TCP loopback, `> /dev/null`)", e, "rdmapipe", "socat", 2.5)
    paired_target("host: rdmapipe --transport tcp >= 1.2x nc, pipe-fed (issue 47; median of paired rounds)", e, "rdmapipe", "nc", 1.2)
    cpu_target("host: rdmapipe's CPU per byte, both sides, at most nc's (issue 47)", e, "rdmapipe", "nc")
    paired_target("host, for reference: this build vs `BEFORE_BIN`'s (median of paired rounds)", e, "rdmapipe", "rdmapipe-before", 0, 1)
    ratio_target("host, for reference: rdmapipe vs mbuffer", e, "rdmapipe", "mbuffer", 0, 1)
    ratio_target("host, for reference: the same into `\\| wc -c`, vs socat", e, "rdmapipe-wc", "socat-wc", 0, 1)
    ratio_target("host, for reference: file input (`rdmasend < file` in /dev/shm) vs pipe input", e, "rdmapipe-file", "rdmapipe", 0, 1)
  }
  if (has("host", "rdmapipe")) rss_target("host", "host")
  if (has("vm", "rdmapipe")) rss_target("vm", "VM")
  pin_target("vm", "rdmapipe", "VM")
  if (has("host", "rdmapipe")) {
    e = "host"
    target("host: pinned memory (TCP transport: nothing to register)", "-",
      sprintf("chunk x depth = %s KiB; says %s / %s KiB; VmPin send %s, recv %s KiB; VmLck %s / %s KiB",
        f((med(e SUBSEP "rdmapipe", "chunk") == "") ? "" : med(e SUBSEP "rdmapipe", "chunk") * med(e SUBSEP "rdmapipe", "depth") / 1024, "%d"),
        f(med(e SUBSEP "rdmapipe", "spinned"), "%d"), f(med(e SUBSEP "rdmapipe", "rpinned"), "%d"),
        f(med(e SUBSEP "rdmapipe", "spin"), "%d"), f(med(e SUBSEP "rdmapipe", "rpin"), "%d"),
        f(med(e SUBSEP "rdmapipe", "slck"), "%d"), f(med(e SUBSEP "rdmapipe", "rlck"), "%d")), 2)
  }
  print ""
}

END {
  if (ntools["host"]) host_table()
  if (ntools["vm"]) vm_table()
  targets()
}
