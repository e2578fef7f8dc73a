#!/bin/bash
# wire.sh - runs inside the SoftRoCE VM (as root): two "hosts" on one wire. A veth pair with
# an rxe device on each end, 10.0.9.1 (rxeA on vethA) and 10.0.9.2 (rxeB on vethB), in ONE
# network namespace, with policy routing so that traffic between the two addresses really
# crosses the veth (its packet counters move) instead of taking lo or rxe's loopback.
# Faults are then injected on the wire with tc netem (netem loss 100% on both veths is a
# blackhole) or `ip link set vethA down`. Blackhole routes in table 91/92 stop TCP but not
# rxe: rxe's route lookups are bound to its netdev, and when such a lookup fails the kernel
# assumes the peer is on link and transmits anyway.
#
# usage: wire.sh up       create the wire if missing, then reset it (idempotent)
#        wire.sh second   after up: a second wire beside it, for striping over two devices
#                         on each side: 10.0.10.1 (rxeC on vethC) <-> 10.0.10.2 (rxeD on
#                         vethD), routed like the first (rules 14-17, tables 93 and 94);
#                         no faults, no reset; prints WIRE2_A=10.0.10.1 WIRE2_B=10.0.10.2
#                         WIRE_DEV_C=rxeC WIRE_DEV_D=rxeD (idempotent)
#        wire.sh reset    undo every fault: no qdisc, links up, routes, neighbours, rxeA and
#                         rxeB ACTIVE again (a link that went down loses its routes and
#                         neighbour entries; this puts them back); ~0.3 s in the VM
#        wire.sh down     remove the wire and the routing rules
#        wire.sh env      print the shell assignments for the addresses (see below)
#
# `up` and `reset` print, on success, the variables the fault tests read:
#   WIRE_A=10.0.9.1 WIRE_B=10.0.9.2 WIRE_DEV_A=rxeA WIRE_DEV_B=rxeB WIRE_SCRIPT=<this file>
#
# Why one namespace: rxe on Debian 12's kernel (6.1) opens its UDP socket in the initial
# namespace only; `rdma link add` succeeds inside another netns, but rdma_cm then reports
# UNREACHABLE. So both ends live in the initial namespace and the routing rules below send
# locally generated traffic for the other end's address out of the right veth:
#   pref 10/11  iif lo  to the peer          locally sent packets (connect, rdma_cm resolve)
#   pref 12/13  oif veth to the peer         lookups bound to a device (rxe's transmit path,
#                                            the CM's check of an incoming request)
#   pref 100    lookup local                 moved down from pref 0, so rules 10-13 win
# Tables 91 and 92 end in an unreachable route, so that a lookup for the peer never falls
# through to the local table (which would carry the packets over lo, around the wire).
set -euo pipefail

A=10.0.9.1 B=10.0.9.2
C=10.0.10.1 D=10.0.10.2
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

STATE=/run/rdmapipe-wire.carrier   # vethA's and vethB's carrier_changes at the last reset

die() { echo "wire.sh: $*" >&2; exit 1; }

print_env() {
  echo "WIRE_A=$A WIRE_B=$B WIRE_DEV_A=rxeA WIRE_DEV_B=rxeB WIRE_SCRIPT=$SELF"
}

# rule PREF SELECTOR...: add a routing rule unless one with that preference exists
rule() {
  local pref=$1; shift
  [ -n "$(ip rule show pref "$pref")" ] || ip rule add pref "$pref" "$@"
}

# wait_active DEV...: wait (up to 10 s, polling) until the rxe devices' ports are ACTIVE
wait_active() {
  local i d links pending
  for i in $(seq 100); do
    links=$(rdma link show 2>/dev/null) pending=
    for d in "$@"; do
      [[ $links == *"link $d/1 state ACTIVE"* ]] || pending+=" $d"
    done
    [ -z "$pending" ] && return 0
    [ "$i" = 100 ] || sleep 0.1
  done
  die "port not ACTIVE:$pending: $links"
}

# reset undoes every fault. Each command costs ~70 ms in the emulated guest, hence one
# tc and one ip batch.
reset() {
  local d
  for d in vethA vethB; do
    [ -e "/sys/class/net/$d" ] || die "no $d: run 'wire.sh up' first"
  done
  printf 'qdisc del dev %s root\n' vethA vethB | tc -force -batch - 2>/dev/null || true
  # route replace also removes a blackhole (or any other fault route) for the peer. The
  # metric-4000 unreachable routes stay underneath: while vethA is down its route is gone,
  # and the peer must then be unreachable, as on a real host, instead of falling through to
  # the local table, which would carry A -> B over lo, around the wire.
  # Permanent neighbours: no ARP on this wire (a link that goes down flushes them).
  ip -batch - <<EOF
link set vethA up
link set vethB up
route replace $B/32 dev vethA src $A table 91
route replace $A/32 dev vethB src $B table 92
route replace unreachable $B/32 table 91 metric 4000
route replace unreachable $A/32 table 92 metric 4000
neigh replace $B lladdr $(</sys/class/net/vethB/address) dev vethA nud permanent
neigh replace $A lladdr $(</sys/class/net/vethA/address) dev vethB nud permanent
EOF
  # After vethA went down under a live RC connection, rxe on 6.1 fails every later
  # rdma_cm connect over the wire (the REQ and the REP cross, then the active side
  # rejects; still so 50 s later), until the rxe devices are created anew. So: when the
  # carrier changed since the last reset, recreate them.
  local flaps
  flaps="$(</sys/class/net/vethA/carrier_changes) $(</sys/class/net/vethB/carrier_changes)"
  if [ -f "$STATE" ] && [ "$(<"$STATE")" != "$flaps" ]; then
    rdma link delete rxeA
    rdma link delete rxeB
    rdma link add rxeA type rxe netdev vethA
    rdma link add rxeB type rxe netdev vethB
    echo "wire.sh: the link went down since the last reset: rxeA and rxeB created anew" >&2
  fi
  wait_active rxeA rxeB
  echo "$flaps" > "$STATE"
}

up() {
  # sch_netem is in the harness's initramfs; else load it with the kernel's own helper
  # (vm-run.sh points it at the unpacked kernel tree; plain modprobe looks in the host's)
  [ -d /sys/module/sch_netem ] || "$(cat /proc/sys/kernel/modprobe)" sch_netem ||
    echo "wire.sh: sch_netem not available; netem faults will fail" >&2
  if [ ! -e /sys/class/net/vethA ]; then
    ip link add vethA type veth peer name vethB
    ip addr add "$A/32" dev vethA
    ip addr add "$B/32" dev vethB
  fi
  local d keys=()
  for d in all default vethA vethB; do
    keys+=("net.ipv4.conf.$d.accept_local=1" "net.ipv4.conf.$d.rp_filter=0")
  done
  sysctl -qw "${keys[@]}"
  rule 10 iif lo to "$B/32" lookup 91
  rule 11 iif lo to "$A/32" lookup 92
  rule 12 oif vethA to "$B/32" lookup 91
  rule 13 oif vethB to "$A/32" lookup 92
  rule 100 lookup local
  while [ -n "$(ip rule show pref 0 lookup local)" ]; do ip rule del pref 0 lookup local; done
  [ -e /sys/class/infiniband/rxeA ] || rdma link add rxeA type rxe netdev vethA
  [ -e /sys/class/infiniband/rxeB ] || rdma link add rxeB type rxe netdev vethB
  reset
}

# second: the second wire (see usage), routed like the first; needs up's rule 100.
second() {
  [ -n "$(ip rule show pref 100)" ] || die "no wire: run 'wire.sh up' first"
  if [ ! -e /sys/class/net/vethC ]; then
    ip link add vethC type veth peer name vethD
    ip addr add "$C/32" dev vethC
    ip addr add "$D/32" dev vethD
  fi
  local d keys=()
  for d in vethC vethD; do
    keys+=("net.ipv4.conf.$d.accept_local=1" "net.ipv4.conf.$d.rp_filter=0")
  done
  sysctl -qw "${keys[@]}"
  rule 14 iif lo to "$D/32" lookup 93
  rule 15 iif lo to "$C/32" lookup 94
  rule 16 oif vethC to "$D/32" lookup 93
  rule 17 oif vethD to "$C/32" lookup 94
  ip -batch - <<EOF
link set vethC up
link set vethD up
route replace $D/32 dev vethC src $C table 93
route replace $C/32 dev vethD src $D table 94
route replace unreachable $D/32 table 93 metric 4000
route replace unreachable $C/32 table 94 metric 4000
neigh replace $D lladdr $(</sys/class/net/vethD/address) dev vethC nud permanent
neigh replace $C lladdr $(</sys/class/net/vethC/address) dev vethD nud permanent
EOF
  [ -e /sys/class/infiniband/rxeC ] || rdma link add rxeC type rxe netdev vethC
  [ -e /sys/class/infiniband/rxeD ] || rdma link add rxeD type rxe netdev vethD
  wait_active rxeC rxeD
}

down() {
  local d p
  for d in rxeA rxeB rxeC rxeD; do rdma link delete "$d" 2>/dev/null || true; done
  ip link delete vethA 2>/dev/null || true   # takes vethB with it
  ip link delete vethC 2>/dev/null || true
  [ -n "$(ip rule show pref 0 lookup local)" ] || ip rule add pref 0 lookup local
  for p in 10 11 12 13 14 15 16 17 100; do
    while [ -n "$(ip rule show pref "$p")" ]; do ip rule del pref "$p"; done
  done
  for p in 91 92 93 94; do ip route flush table "$p" 2>/dev/null || true; done
  rm -f "$STATE"
}

[ "$(id -u)" = 0 ] || die "must run as root (inside the SoftRoCE VM)"
case "${1:-}" in
  up)    up; print_env ;;
  second) second; echo "WIRE2_A=$C WIRE2_B=$D WIRE_DEV_C=rxeC WIRE_DEV_D=rxeD" ;;
  reset) reset; print_env ;;
  down)  down ;;
  env)   print_env ;;
  *)     sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac
