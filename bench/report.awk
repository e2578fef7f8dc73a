# bench/report.awk - turns the raw measurements of bench/run.sh (tab-separated, one line
# per run; columns as written by record() in bench/lib.sh) into markdown tables: one per
# environment, medians of the successful runs, then the project's targets with pass/miss.
# usage: awk -F'\t' -v host_size=1G -v vm_size=256M -f bench/report.awk host.tsv vm.tsv
#
# columns: 1 env, 2 tool, 3 run, 4 ok, 5 bytes, 6 wall s, 7 send CPU s, 8 send RSS KiB,
# 9 recv CPU s, 10 recv RSS KiB, 11 tool's own MB/s, 12 send VmPin KiB, 13 recv VmPin,
# 14 send VmLck, 15 recv VmLck, 16 chunk, 17 depth, 18 messages, 19 note ("-" = none)

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
function mib(kib) { return (kib == "") ? "" : kib / 1024 }
function verdict(ok) { return ok ? "pass" : "**miss**" }
function has(e, t) { return ((e SUBSEP t) in runs) }

# the rate a peer is compared by: ib_send_bw's own "BW average" (the brief's reference,
# data phase only), the wall-clock rate for everything else
function ref(e, t) { return (t ~ /^ib_send_bw/) ? med(e SUBSEP t, "self") : med(e SUBSEP t, "mbps") }

BEGIN {
  label["pipe"] = "pipe alone: `head \\| cat` (ceiling for pipe-fed tools)"
  label["rdmapipe"] = "**rdmapipe** `rdmasend` -> `rdmarecv > /dev/null`"
  label["rdmapipe-wc"] = "**rdmapipe** `rdmasend` -> `rdmarecv \\| wc -c`"
  label["rdmapipe-busy"] = "rdmapipe `--busy-poll` both sides, `> /dev/null`"
  label["socat"] = "socat -u, `> /dev/null`"
  label["socat-wc"] = "socat -u, `\\| wc -c`"
  label["nc"] = "nc -N -> nc -d -l, `> /dev/null`"
  label["ib_send_bw"] = "ib_send_bw -R, 1 MiB msgs, polling"
  label["ib_send_bw-e"] = "ib_send_bw -R -e, 1 MiB msgs, CQ events"
  label["rcopy"] = "rcopy (rsockets; tmpfs file -> tmpfs file)"
  GiB = 1073741824
}

{
  e = $1; t = $2; k = e SUBSEP t
  if ($3 == 0) {   # the warm-up: only its failures are reported
    if ($4 != 1) warmfail[e, t] = $19
    next
  }
  if (!((e, t) in runs)) { order[e, ++ntools[e]] = t }
  runs[e, t]++
  if ($4 != 1) {
    if (!((e, t) in fail)) fail[e, t] = "run " $3 ": " $19
    next
  }
  okruns[e, t]++
  b = $5 + 0
  add(k, "bytes", b)
  if ($6 + 0 > 0) add(k, "mbps", b / $6 / 1e6)
  add(k, "self", $11)
  if ($7 != "-") add(k, "scpu", $7 / (b / GiB))
  if ($9 != "-") add(k, "rcpu", $9 / (b / GiB))
  if ($7 != "-" && $9 != "-") add(k, "tcpu", ($7 + $9) / (b / GiB))
  add(k, "srss", $8); add(k, "rrss", $10)
  add(k, "spin", $12); add(k, "rpin", $13); add(k, "slck", $14); add(k, "rlck", $15)
  add(k, "chunk", $16); add(k, "depth", $17)
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
  if (!has(e, t)) return
  c = med(k, "chunk"); d = med(k, "depth")
  printf "- %s: chunk %s x depth %s = %s MiB per side (from `--stats-json`); %s messages per GiB, %s KiB per message on average",
    t, f(c / 1024, "%g KiB"), f(d, "%d"), f((c * d) / 1048576, "%g"), f(med(k, "msgs_gib"), "%.0f"), f(med(k, "avgmsg") / 1024, "%.0f")
  printf "; pinned (VmPin peak, /proc) send %s / recv %s KiB, locked (VmLck) %s / %s KiB\n",
    f(med(k, "spin"), "%d"), f(med(k, "rpin"), "%d"), f(med(k, "slck"), "%d"), f(med(k, "rlck"), "%d")
}

function failures(e,    i, t) {
  for (i = 1; i <= ntools[e]; i++) {
    t = order[e, i]
    if ((e, t) in fail) printf "- failed runs of %s (first one): %s\n", t, fail[e, t]
    if ((e, t) in warmfail) printf "- the warm-up run of %s (8 MiB, not in the medians) failed: %s\n", t, warmfail[e, t]
  }
}

function host_table(   i, t, peer, e) {
  e = "host"
  printf "## 1. Host: TCP loopback (127.0.0.1), %s per run\n\n", host_size
  print "| tool | runs ok | MB/s | x socat | send CPU s/GiB | recv CPU s/GiB | both CPU s/GiB | send peak RSS MiB | recv peak RSS MiB |"
  print "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for (i = 1; i <= ntools[e]; i++) {
    t = order[e, i]
    peer = (t ~ /-wc$/ && has(e, "socat-wc")) ? "socat-wc" : "socat"
    printf "| %s | %s | %s | %s |%s\n", (t in label) ? label[t] : t, okcol(e, t),
      f(med(e SUBSEP t, "mbps"), "%.1f"), (t == "pipe") ? "-" : f(ratio(med(e SUBSEP t, "mbps"), med(e SUBSEP peer, "mbps")), "%.2f"), common(e, t)
  }
  print ""
  print "- rdmapipe runs `--transport tcp`; `x socat` compares with socat writing to the same sink (`> /dev/null` or `| wc -c`)."
  print "- both CPU: send + receive CPU of each run (median). The pipe row's send columns are `head -c` itself (it feeds every pipe-fed"
  print "  tool and is in no other row's CPU), its receive columns `cat`."
  details(e, "rdmapipe")
  failures(e)
  print ""
}

function vm_table(   i, t, e, rp) {
  e = "vm"
  rp = med(e SUBSEP "rdmapipe", "mbps")
  printf "## 2. SoftRoCE VM: rxe0, both ends on 10.0.3.1, %s per run\n\n", vm_size
  print "| tool | runs ok | MB/s (wall) | MB/s (tool's own) | rdmapipe / this | send CPU s/GiB | recv CPU s/GiB | both CPU s/GiB | send peak RSS MiB | recv peak RSS MiB |"
  print "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for (i = 1; i <= ntools[e]; i++) {
    t = order[e, i]
    printf "| %s | %s | %s | %s | %s |%s\n", (t in label) ? label[t] : t, okcol(e, t),
      f(med(e SUBSEP t, "mbps"), "%.1f"), f(med(e SUBSEP t, "self"), "%.1f"),
      (t == "rdmapipe") ? "1.00" : (t == "pipe") ? "-" : f(ratio(rp, ref(e, t)), "%.2f"), common(e, t)
  }
  print ""
  print "- rdmapipe runs `--transport rdma` (default: event-driven completions). `rdmapipe / this`: rdmapipe's wall-clock MB/s (`> /dev/null`) over"
  print "  this row's rate: ib_send_bw's own BW average (data phase only, no process start or connection set-up), the wall-clock MB/s otherwise."
  print "- tool's own MB/s: rdmasend's `--stats-json` rate, ib_send_bw's BW average, rcopy's own figure (MiB and Gb/s converted to MB/s)."
  print "- ib_send_bw moves the same bytes as VM_SIZE/1 MiB messages from a registered buffer (no pipe, no copy); rcopy reads an mmapped"
  print "  file (no pipe; its RSS includes that mapping) and writes one in tmpfs; socat runs over the guest's kernel TCP on the"
  print "  same dummy interface. Pipe-fed tools (rdmapipe, socat) also pay for `head -c` on the same 2 vCPUs: the pipe row's send CPU."
  details(e, "rdmapipe")
  details(e, "rdmapipe-busy")
  failures(e)
  print ""
}

# target ROW MEASURED OK: one line of the targets table (OK: 1 pass, 0 miss, -1 no data)
function target(row, measured, ok) {
  printf "| %s | %s | %s |\n", row, measured, (ok < 0) ? "no data" : verdict(ok)
}

function ratio_target(row, e, a, b, want, info,    r, m) {
  r = ratio(med(e SUBSEP a, "mbps"), ref(e, b))
  m = (r == "") ? "-" : sprintf("%.2fx (%.1f vs %.1f MB/s)", r, med(e SUBSEP a, "mbps"), ref(e, b))
  if (info) printf "| %s | %s | info |\n", row, m
  else target(row, m, (r == "") ? -1 : (r >= want))
}

function rss_target(e, name,    s, r) {
  s = mib(med(e SUBSEP "rdmapipe", "srss")); r = mib(med(e SUBSEP "rdmapipe", "rrss"))
  target(name ": rdmapipe peak RSS <= 64 MiB per side, default settings",
    sprintf("send %s, recv %s MiB", f(s, "%.1f"), f(r, "%.1f")), (s == "" || r == "") ? -1 : (s <= 64 && r <= 64))
}

function targets(   k, c, d, want, sp, rpn, ok) {
  print "## 3. Targets"
  print ""
  print "| target | measured (medians) | result |"
  print "| --- | --- | --- |"
  if (has("vm", "rdmapipe")) {
    ratio_target("VM: rdmapipe >= 0.95x ib_send_bw at 1 MiB messages (its BW average)", "vm", "rdmapipe", "ib_send_bw", 0.95, 0)
    ratio_target("VM: rdmapipe >= 1.2x rcopy (wall clock both)", "vm", "rdmapipe", "rcopy", 1.2, 0)
    ratio_target("VM, for reference: rdmapipe vs ib_send_bw -e (events, like rdmapipe's default)", "vm", "rdmapipe", "ib_send_bw-e", 0, 1)
    if (has("vm", "rdmapipe-busy"))
      ratio_target("VM, for reference: rdmapipe --busy-poll vs ib_send_bw (polling both)", "vm", "rdmapipe-busy", "ib_send_bw", 0, 1)
    ratio_target("VM, for reference: rdmapipe vs socat over the guest's kernel TCP", "vm", "rdmapipe", "socat", 0, 1)
    # rdmapipe's own data-phase rate against ib_send_bw's (both without process start-up)
    k = med("vm" SUBSEP "rdmapipe", "self")
    printf "| VM, for reference: rdmapipe's own rate vs ib_send_bw's BW average | %s | info |\n",
      (k == "" || ref("vm", "ib_send_bw") == "") ? "-" : sprintf("%.2fx (%.1f vs %.1f MB/s)", k / ref("vm", "ib_send_bw"), k, ref("vm", "ib_send_bw"))
  }
  if (has("host", "rdmapipe")) {
    ratio_target("host: rdmapipe >= 1.2x socat (TCP loopback, `> /dev/null`)", "host", "rdmapipe", "socat", 1.2, 0)
    if (has("host", "rdmapipe-wc"))
      ratio_target("host, for reference: the same into `\\| wc -c`", "host", "rdmapipe-wc", "socat-wc", 0, 1)
  }
  if (has("host", "rdmapipe")) rss_target("host", "host")
  if (has("vm", "rdmapipe")) rss_target("vm", "VM")
  if (has("vm", "rdmapipe")) {
    k = "vm" SUBSEP "rdmapipe"
    c = med(k, "chunk"); d = med(k, "depth"); sp = med(k, "spin"); rpn = med(k, "rpin")
    want = (c == "" || d == "") ? "" : c * d / 1024   # KiB
    # pass: at least chunk x depth (else the sampler missed it) and at most 64 KiB more
    # (the README's "plus a little": control and credit buffers)
    ok = (want == "" || sp == "" || rpn == "") ? -1 : (sp >= want && sp <= want + 64 && rpn >= want && rpn <= want + 64)
    target("VM: pinned memory = chunk x depth per side (VmPin while running, rdma transport)",
      sprintf("chunk x depth = %s KiB; VmPin send %s KiB (%s chunks), recv %s KiB (%s chunks)", f(want, "%d"),
        f(sp, "%d"), f((c == "" || sp == "") ? "" : sp * 1024 / c, "%.2f"), f(rpn, "%d"), f((c == "" || rpn == "") ? "" : rpn * 1024 / c, "%.2f")), ok)
  }
  if (has("host", "rdmapipe")) {
    k = "host" SUBSEP "rdmapipe"
    printf "| host: pinned memory (TCP transport: nothing to register) | chunk x depth = %s KiB; VmPin send %s, recv %s KiB; VmLck %s / %s KiB | info |\n",
      f(med(k, "chunk") * med(k, "depth") / 1024, "%d"), f(med(k, "spin"), "%d"), f(med(k, "rpin"), "%d"), f(med(k, "slck"), "%d"), f(med(k, "rlck"), "%d")
  }
  print ""
}

END {
  if (ntools["host"]) host_table()
  if (ntools["vm"]) vm_table()
  targets()
}
