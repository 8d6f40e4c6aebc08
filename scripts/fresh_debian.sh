#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12 machine, built here: a new root made by
# debootstrap (Debian's packages only), in a network namespace of its own that reaches the
# internet through NAT but none of this host's servers (its loopback is its own), so that
# `make test` and `make run` find no PostgreSQL or Redis and must install and start what they
# need, as on a user's new machine.
#
#   sudo scripts/fresh_debian.sh [--keep] [--with-servers] [FOLDER]
#
# FOLDER (default /var/tmp/mi-fresh-root) gets the new root; it is removed at the end
# unless --keep. --with-servers installs and starts PostgreSQL and Redis on their default
# ports inside the new root first (trust auth, no test database), as this project's CI
# machines have them. Steps and their durations are printed; the exit status is the first
# failing step's. Needs root, debootstrap and iptables (installed with apt if missing).
set -euo pipefail

keep=0
with_servers=0
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1; shift ;;
    --with-servers) with_servers=1; shift ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) break ;;
  esac
done
root=${1:-/var/tmp/mi-fresh-root}
repo=$(cd "$(dirname "$0")/.." && pwd)
ns=mi-fresh-$$
veth=mifr$$
subnet=10.238.$(( $$ % 250 )).0/30
host_ip=10.238.$(( $$ % 250 )).1
guest_ip=10.238.$(( $$ % 250 )).2

[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }
need=""
command -v debootstrap >/dev/null || need="$need debootstrap"
command -v iptables >/dev/null || need="$need iptables"
if [ -n "$need" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >/dev/null
fi

step() {  # step NAME COMMAND...: run, print its duration
  local name=$1; shift
  local start=$SECONDS
  echo "== $name" >&2
  if "$@"; then
    echo "== $name: done in $(( SECONDS - start )) s" >&2
  else
    local code=$?
    echo "== $name: FAILED (exit $code) after $(( SECONDS - start )) s" >&2
    return $code
  fi
}

forward_before=$(cat /proc/sys/net/ipv4/ip_forward)
cleanup() {
  set +e
  # Whatever still runs inside the new root (servers, a stuck stack) is ours to stop.
  for proc in /proc/[0-9]*; do
    if [ "$(readlink "$proc/root" 2>/dev/null)" = "$root" ]; then kill -9 "${proc#/proc/}" 2>/dev/null; fi
  done
  sleep 1
  for mount in dev/pts dev proc sys; do umount -R "$root/$mount" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
  ip link del "$veth" 2>/dev/null
  iptables -t nat -D POSTROUTING -s "$subnet" -j MASQUERADE 2>/dev/null
  echo "$forward_before" > /proc/sys/net/ipv4/ip_forward
  if [ "$keep" = 0 ]; then rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT

rm -rf --one-file-system "$root"
mkdir -p "$root"
step "debootstrap bookworm (Debian's minbase: no make, no Python)" \
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null

# A clean clone of what is committed, with ../shared beside it as in CI.
step "clone" git clone -q "$repo" "$root/root/mi-assessment"
if [ -d "$repo/../shared" ]; then cp -a "$repo/../shared" "$root/root/shared"; fi

ip netns add "$ns"
ip link add "$veth" type veth peer name "${veth}g"
ip link set "${veth}g" netns "$ns"
ip addr add "$host_ip/30" dev "$veth"
ip link set "$veth" up
ip netns exec "$ns" ip addr add "$guest_ip/30" dev "${veth}g"
ip netns exec "$ns" ip link set "${veth}g" up
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" ip route add default via "$host_ip"
echo 1 > /proc/sys/net/ipv4/ip_forward
iptables -t nat -A POSTROUTING -s "$subnet" -j MASQUERADE
cp /etc/resolv.conf "$root/etc/resolv.conf"
# Where this host's egress goes through an intercepting proxy, its CA (a local certificate
# the host trusts) and the host's pip setting that uses the system's bundle come along;
# a real new machine needs neither.
mkdir -p "$root/usr/local/share/ca-certificates"
for cert in /usr/local/share/ca-certificates/*.crt; do
  [ -e "$cert" ] && cp "$cert" "$root/usr/local/share/ca-certificates/"
done
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"

inside() {  # inside SCRIPT: bash -c SCRIPT as root in the new root, in its network namespace
  ip netns exec "$ns" chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "$1"
}

step "nothing listens on the default ports" inside \
  '! (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null && ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null'
step "apt-get install make (the README's only prerequisite)" inside \
  'apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q make >/dev/null'
if [ "$with_servers" = 1 ]; then
  step "PostgreSQL and Redis on the default ports, no test database (as on CI machines)" inside '
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql redis-server >/dev/null &&
    printf "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n" > /etc/postgresql/15/main/pg_hba.conf &&
    pg_ctlcluster 15 main start &&
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no'
fi
step "make test" inside 'cd /root/mi-assessment && make test'
step "make run: ready, a report generated, stopped by SIGTERM" inside '
  cd /root/mi-assessment
  setsid make run > /tmp/make-run.log 2>&1 &
  pid=$!  # the group leader: SIGTERM to the group, as Ctrl-C in a terminal
  for _ in $(seq 600); do grep -q "ready: http" /tmp/make-run.log && break; sleep 1; done
  grep "ready: http" /tmp/make-run.log || { tail -50 /tmp/make-run.log; exit 1; }
  timeout 120 make demo DEMO_ARGS="--records 10 --users 2 --timeout 60" || { tail -50 /tmp/make-run.log; exit 1; }
  kill -TERM -- -$pid; wait $pid; code=$?
  tail -3 /tmp/make-run.log
  # make itself dies of the signal (143), as of Ctrl-C in a terminal; the stack must have
  # stopped in order, its servers last.
  [ "$code" = 0 ] || [ "$code" = 143 ] || exit $code
  grep -q "processes stopped; stopping the servers started here" /tmp/make-run.log'
echo "fresh Debian 12: the README's two commands passed" >&2
