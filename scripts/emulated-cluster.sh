#!/usr/bin/env bash
# emulated-cluster.sh - an emulated cluster with slow per-node links on one machine (docs/emulated-cluster.md).
#
# usage: scripts/emulated-cluster.sh up     --nodes N --rate R [--ranks-per-node K] [--name NAME]
#        scripts/emulated-cluster.sh run    [--name NAME] -- <mpiexec arguments...>
#        scripts/emulated-cluster.sh down   [--name NAME]
#        scripts/emulated-cluster.sh status [--name NAME]
#        scripts/emulated-cluster.sh check                 # can this machine do it? (exit 3 if not)
#
#   up      N network namespaces "NAME-n0" ... as nodes, each with a veth link (eth0, 10.77.0.(i+1)/24)
#           into the bridge br0 (10.77.0.254) of a hub namespace "NAME-hub"; a token-bucket shaper
#           (tc tbf rate R burst 256kb latency 5s) on both ends of every link. All addresses exist only
#           inside these namespaces: the host's network is not touched. Refuses if NAME exists, and
#           clusters of more ranks (N x K) than this machine holds (MAX_RANKS below).
#   run     mpiexec (MPICH hydra, found on PATH or HPCGC_MPIEXEC) in the hub namespace, one hydra proxy
#           per node started through scripts/emulated-cluster-launch (ip netns exec + its own UTS
#           namespace: every rank of node i sees the host name NAME-n<i>), -iface br0
#           -hosts <the node addresses>[:K], MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=sockets.
#           K = 1: MPIR_CVAR_NOLOCAL=1, every message takes the shaped network path (as before).
#           K > 1: the K ranks of a node (consecutive ranks) talk through shared memory, the nodes
#           through the shaped links; -n must be a multiple of K and at most N x K.
#           The ranks see the caller's environment (PATH, VIRTUAL_ENV, PYTHONPATH, ...;
#           NUMBA_NUM_THREADS defaults to 1). Exit status: mpiexec's.
#   down    kills what runs in the namespaces and removes them (also after a failed up/run). Idempotent.
#   status  the cluster's nodes, addresses and shapers (or all clusters, without --name).
#
#   --nodes N    2 ... 250          --rate R   tc rate: 1gbit, 100mbit, 10mbit, 500kbit, ...
#   --ranks-per-node K   1 ... 64 (default 1): MPI ranks per node, sharing memory inside the node.
#                N x K at most MAX_RANKS = 64 ranks (HPCGC_EMULATED_MAX_RANKS overrides; docs/emulated-cluster.md
#                "How large").
#   --name NAME  prefix of every namespace (default hpcgc-emu; [A-Za-z0-9_.-], at most 40 characters).
#                Use a unique name per concurrent user (tests use one per invocation).
#
# Needs root, or CAP_NET_ADMIN + CAP_SYS_ADMIN (ip netns), iproute2 (ip, tc), unshare, the kernel's veth,
# bridge and sch_tbf. Example, 4 nodes at 1 Gb/s:
#   scripts/emulated-cluster.sh up --nodes 4 --rate 1gbit
#   scripts/emulated-cluster.sh run -- -n 4 python -m hpcgc.bench collectives --max-size 16M
#   scripts/emulated-cluster.sh down
# Exit status: 0 ok, 2 bad arguments (nothing built), 3 this machine cannot (privileges, tools, kernel).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE_ROOT=${HPCGC_EMULATED_STATE:-/run/hpcgc-emulated-cluster}
SUBNET=10.77.0        # private, and only inside the cluster's own namespaces
HUB_ADDR=$SUBNET.254
BURST=256kb
LATENCY=5s
# the largest cluster (N x K ranks) measured to work on this 2-core, 24 GB machine (64 x 1), by
# scripts/emulated-cluster-capacity.sh (docs/emulated-cluster.md, "How large")
MAX_RANKS=${HPCGC_EMULATED_MAX_RANKS:-64}

die() { echo "emulated-cluster: error: $*" >&2; exit "${DIE_STATUS:-2}"; }
usage() { sed -n '2,39p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

# capabilities: root, or CAP_NET_ADMIN (bit 12) and CAP_SYS_ADMIN (bit 21, needed by ip netns) effective
have_caps() {
  [ "$(id -u)" = 0 ] && return 0
  local eff
  eff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status 2>/dev/null) || return 1
  [ -n "$eff" ] || return 1
  (( (16#$eff >> 12) & 1 )) && (( (16#$eff >> 21) & 1 ))
}

require_tools() {
  have_caps || DIE_STATUS=3 die "needs root or CAP_NET_ADMIN + CAP_SYS_ADMIN (network namespaces, tc); run with sudo"
  command -v ip >/dev/null || DIE_STATUS=3 die "'ip' (iproute2) not found"
  command -v tc >/dev/null || DIE_STATUS=3 die "'tc' (iproute2) not found"
  command -v unshare >/dev/null || DIE_STATUS=3 die "'unshare' (util-linux) not found"
}

NAME=hpcgc-emu NODES="" RATE="" RPN=1
parse_opts() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) [ $# -ge 2 ] || die "--nodes needs a value"; NODES=$2; shift 2 ;;
      --nodes=*) NODES=${1#*=}; shift ;;
      --rate) [ $# -ge 2 ] || die "--rate needs a value"; RATE=$2; shift 2 ;;
      --rate=*) RATE=${1#*=}; shift ;;
      --ranks-per-node) [ $# -ge 2 ] || die "--ranks-per-node needs a value"; RPN=$2; shift 2 ;;
      --ranks-per-node=*) RPN=${1#*=}; shift ;;
      --name) [ $# -ge 2 ] || die "--name needs a value"; NAME=$2; shift 2 ;;
      --name=*) NAME=${1#*=}; shift ;;
      --) shift; REST=("$@"); return 0 ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown argument '$1' (see --help)" ;;
    esac
  done
  REST=()
}

check_name() {
  [[ $NAME =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$ ]] ||
    die "--name '$NAME': use 1-40 characters of [A-Za-z0-9_.-], starting with a letter or digit"
  DIR=$STATE_ROOT/$NAME
  HUB=$NAME-hub
}

ns_exists() { [ -e "/run/netns/$1" ]; }

# every namespace of cluster NAME (from the state file, plus any left by a failed up)
cluster_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$(printf '%s' "$NAME" | sed 's/[.]/\\./g')-(hub|n[0-9]+)$" || true
}

cmd_check() {
  require_tools
  local p=hpcgc-emu-check-$$ ok=1
  { ip netns add "$p-a" && ip netns add "$p-b" &&
    ip link add name eth0 netns "$p-a" type veth peer name v0 netns "$p-b" &&
    ip -n "$p-b" link add br0 type bridge &&
    tc -n "$p-a" qdisc add dev eth0 root tbf rate 1gbit burst $BURST latency $LATENCY; } 2>/tmp/$p.err || ok=0
  ip netns del "$p-a" 2>/dev/null || true
  ip netns del "$p-b" 2>/dev/null || true
  if [ $ok = 0 ]; then
    local msg; msg=$(tr '\n' ' ' </tmp/$p.err); rm -f /tmp/$p.err
    DIE_STATUS=3 die "this machine cannot build the emulation (network namespace, veth, bridge or tbf missing): $msg"
  fi
  rm -f /tmp/$p.err
  echo "emulated-cluster: ok (network namespaces, veth, bridge and tc tbf work here)"
}

cmd_up() {
  require_tools
  [ -n "$NODES" ] || die "up needs --nodes N"
  [ -n "$RATE" ] || die "up needs --rate R (e.g. 1gbit, 100mbit)"
  [[ $NODES =~ ^[0-9]+$ ]] && [ "$NODES" -ge 2 ] && [ "$NODES" -le 250 ] ||
    die "--nodes '$NODES': a whole number from 2 to 250"
  [[ $RATE =~ ^[0-9]+(\.[0-9]+)?([kmgt]?(bit|bps))$ ]] ||
    die "--rate '$RATE': a tc rate such as 1gbit, 100mbit, 10mbit, 500kbit (bit = bits/s, bps = bytes/s)"
  [[ $RPN =~ ^[0-9]+$ ]] && [ "$RPN" -ge 1 ] && [ "$RPN" -le 64 ] ||
    die "--ranks-per-node '$RPN': a whole number from 1 to 64"
  [[ $MAX_RANKS =~ ^[0-9]+$ ]] || die "HPCGC_EMULATED_MAX_RANKS '$MAX_RANKS': a whole number"
  [ $((NODES * RPN)) -le "$MAX_RANKS" ] ||
    die "--nodes $NODES --ranks-per-node $RPN is $((NODES * RPN)) ranks; this machine holds at most $MAX_RANKS ($(nproc 2>/dev/null || echo '?') cores: every rank of every node shares them, and more were not measured to work; docs/emulated-cluster.md, 'How large'). HPCGC_EMULATED_MAX_RANKS=<n> overrides"
  if [ -e "$DIR" ] || [ -n "$(cluster_namespaces)" ]; then
    die "cluster '$NAME' exists already (scripts/emulated-cluster.sh status --name $NAME; down --name $NAME removes it)"
  fi
  mkdir -p "$DIR"
  # from here on a failure removes whatever was built
  trap 'echo "emulated-cluster: error: up failed; removing cluster $NAME" >&2; cmd_down_quiet' ERR
  echo "$NODES" >"$DIR/nodes"
  echo "$RATE" >"$DIR/rate"
  echo "$RPN" >"$DIR/ranks_per_node"
  : >"$DIR/hosts"
  ip netns add "$HUB"
  ip -n "$HUB" link set lo up
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" addr add "$HUB_ADDR/24" dev br0
  ip -n "$HUB" link set br0 up
  local i node addr
  for ((i = 0; i < NODES; i++)); do
    node=$NAME-n$i addr=$SUBNET.$((i + 1))
    ip netns add "$node"
    ip -n "$node" link set lo up
    ip link add name eth0 netns "$node" type veth peer name "v$i" netns "$HUB"
    ip -n "$node" addr add "$addr/24" dev eth0
    ip -n "$node" link set eth0 up
    ip -n "$HUB" link set "v$i" master br0
    ip -n "$HUB" link set "v$i" up
    tc -n "$node" qdisc add dev eth0 root tbf rate "$RATE" burst $BURST latency $LATENCY
    tc -n "$HUB" qdisc add dev "v$i" root tbf rate "$RATE" burst $BURST latency $LATENCY
    echo "$addr $node" >>"$DIR/hosts"
  done
  # check that every node answers: a TCP connection to a closed port is refused at once when the
  # node is reachable (no ping needed)
  for ((i = 0; i < NODES; i++)); do
    addr=$SUBNET.$((i + 1))
    local t out
    for t in $(seq 1 50); do
      out=$(ip netns exec "$HUB" timeout 2 bash -c "exec 3<>/dev/tcp/$addr/9" 2>&1 || true)
      case "$out" in *refused*) break ;; esac
      [ "$t" = 50 ] && { echo "emulated-cluster: error: node $addr does not answer" >&2; false; }
      sleep 0.1
    done
  done
  trap - ERR
  echo "emulated-cluster: $NAME up: $NODES nodes ($SUBNET.1 ... $SUBNET.$NODES) x $RPN rank(s) per node, hub $HUB ($HUB_ADDR on br0), every link $RATE each way (tbf burst $BURST)"
}

cmd_down_quiet() {
  local ns pid pids
  for ns in $(cluster_namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  done
  if [ -n "${pids:-}" ]; then sleep 0.5; fi
  for ns in $(cluster_namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$DIR"
}

cmd_down() {
  require_tools
  local had; had=$( { [ -e "$DIR" ] || [ -n "$(cluster_namespaces)" ]; } && echo 1 || echo 0)
  cmd_down_quiet
  [ -n "$(cluster_namespaces)" ] && die "could not remove every namespace of $NAME: $(cluster_namespaces | tr '\n' ' ')"
  if [ "$had" = 1 ]; then echo "emulated-cluster: $NAME down"; else echo "emulated-cluster: $NAME was not up (nothing to do)"; fi
}

cmd_status() {
  require_tools
  if [ "$NAME_GIVEN" = 0 ]; then
    local d found=0
    for d in "$STATE_ROOT"/*/; do
      [ -f "$d/nodes" ] || continue
      found=1
      echo "$(basename "$d"): $(cat "$d/nodes") nodes x $(cat "$d/ranks_per_node" 2>/dev/null || echo 1) rank(s) per node at $(cat "$d/rate")"
    done
    [ $found = 1 ] || echo "emulated-cluster: no cluster is up"
    return 0
  fi
  [ -f "$DIR/hosts" ] || { echo "emulated-cluster: $NAME is not up"; exit 1; }
  echo "cluster $NAME: $(cat "$DIR/nodes") nodes x $(cluster_rpn) rank(s) per node, every link $(cat "$DIR/rate") each way; hub $HUB ($HUB_ADDR on br0)"
  local addr node
  while read -r addr node; do
    echo "  $node  $addr  $(tc -n "$node" qdisc show dev eth0 | head -1)"
  done <"$DIR/hosts"
}

cmd_run() {
  require_tools
  [ -f "$DIR/hosts" ] || die "cluster '$NAME' is not up (scripts/emulated-cluster.sh up --name $NAME --nodes N --rate R)"
  [ ${#REST[@]} -gt 0 ] || die "run needs the mpiexec arguments after --, e.g. run -- -n 4 python -m hpcgc.bench"
  local mpiexec=${HPCGC_MPIEXEC:-$(command -v mpiexec || true)}
  [ -n "$mpiexec" ] && [ -x "$mpiexec" ] ||
    die "mpiexec not found (activate the virtualenv: source .venv/bin/activate, or set HPCGC_MPIEXEC)"
  local version
  version=$("$mpiexec" --version 2>/dev/null || true)    # (no pipe into grep -q: SIGPIPE under pipefail)
  [[ $version == *HYDRA* ]] ||
    die "$mpiexec is not MPICH's hydra mpiexec (the emulation starts its proxies with -launcher-exec)"
  local rpn hosts np
  rpn=$(cluster_rpn)
  if [ "$rpn" = 1 ]; then
    hosts=$(awk '{print $1}' "$DIR/hosts" | paste -sd, -)
    local locality=(MPIR_CVAR_NOLOCAL=1)     # one rank per node: every byte on the shaped network
  else
    np=$(mpiexec_np "${REST[@]}")
    [[ $np =~ ^[0-9]+$ ]] || np=""
    local nodes; nodes=$(cat "$DIR/nodes")
    if [ -n "$np" ]; then
      [ $((np % rpn)) = 0 ] ||
        die "-n $np is not a multiple of the cluster's $rpn ranks per node (up --ranks-per-node $rpn): every node runs $rpn ranks"
      [ "$np" -le $((nodes * rpn)) ] ||
        die "-n $np is more than the cluster's $nodes nodes x $rpn ranks per node = $((nodes * rpn)) ranks"
    fi
    hosts=$(awk -v k="$rpn" '{print $1 ":" k}' "$DIR/hosts" | paste -sd, -)
    local locality=(MPIR_CVAR_NOLOCAL=0)     # the ranks of a node share memory, the nodes the shaped links
  fi
  # the ranks inherit this environment (same file system: the venv and the repository are visible)
  exec ip netns exec "$HUB" env \
    HPCGC_EMULATED_CLUSTER_HOSTS="$DIR/hosts" \
    "${locality[@]}" MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=sockets FI_SOCKETS_IFACE=eth0 \
    NUMBA_NUM_THREADS="${NUMBA_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" \
    "$mpiexec" -launcher ssh -launcher-exec "$HERE/emulated-cluster-launch" \
    -iface br0 -hosts "$hosts" "${REST[@]}"
}

# ranks per node of the cluster that is up (1 for clusters built before the option existed)
cluster_rpn() { cat "$DIR/ranks_per_node" 2>/dev/null || echo 1; }

# the rank count of mpiexec's arguments (-n / -np before the program), empty if not given
mpiexec_np() {
  while [ $# -gt 0 ]; do
    case "$1" in
      -n|-np) echo "${2:-}"; return 0 ;;
      -n=*|-np=*) echo "${1#*=}"; return 0 ;;
      -*) shift ;;
      *) return 0 ;;          # the program: its own -n is not mpiexec's
    esac
  done
}

[ $# -gt 0 ] || { usage >&2; exit 2; }
CMD=$1; shift
case "$CMD" in -h|--help|help) usage; exit 0 ;; esac
NAME_GIVEN=0
for a in "$@"; do [ "$a" = -- ] && break; case "$a" in --name|--name=*) NAME_GIVEN=1 ;; esac; done
parse_opts "$@"
check_name
case "$CMD" in
  up) [ ${#REST[@]} = 0 ] || die "up takes no arguments after --"; cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  run) cmd_run ;;
  check) cmd_check ;;
  *) die "unknown command '$CMD' (up, run, down, status, check)" ;;
esac
