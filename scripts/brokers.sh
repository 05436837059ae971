#!/usr/bin/env bash
# scripts/brokers.sh — start, stop and describe the real brokers the tests run against.
#
#   scripts/brokers.sh up     [name…]   start (idempotent; waits until each answers)
#   scripts/brokers.sh down   [name…]   stop what this script started (pid files)
#   scripts/brokers.sh status [name…]   one line per broker: up/down
#   scripts/brokers.sh env    [name…]   `export` lines of the URLs the tests read
#   scripts/brokers.sh node NAME kill|stop|start N   one node of a cluster (kill: SIGKILL)
#   scripts/brokers.sh node NAME leader [ARG]         the node number that leads (ARG: a key, a queue)
#
# Names: redis rabbitmq kafka artemis sqs pulsar postgres, and the secure variants
# redis-tls rabbitmq-tls postgres-tls kafka-tls artemis-tls pulsar-tls (TLS and their own
# users, beside the plain ones; certificates from scripts/certs.sh). No names = the
# default set. Everything binds to 127.0.0.1. See docs/brokers.md and docs/security.md.
# Clusters (issue 35; never in the default set, each node its own process under
# $STATE/NAME/nodeN): redis-sentinel redis-cluster artemis-ha kafka-cluster rabbitmq-cluster.
#
# Environment:
#   BQ_CACHE_DIR      downloads / unpacked distributions (default ~/.cache/babelqueue)
#   BQ_STATE_DIR      data, pid files, logs <name>.log   (default /tmp/babelqueue-brokers)
#   BQ_BROKER_TIMEOUT seconds to wait for each broker     (default 120; Pulsar 300)
#   BQ_M2_REPO        Maven local repository to use       (default: Maven's own, ~/.m2/repository)
#   BQ_JAVA           java binary for the JVM brokers     (default: java on PATH)
#   BQ_SKIP_BROKERS   names to leave out of the default set, e.g. "pulsar"
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ASSETS="$HERE/brokers"
CACHE=${BQ_CACHE_DIR:-${HOME:-/root}/.cache/babelqueue}
STATE=${BQ_STATE_DIR:-/tmp/babelqueue-brokers}
TIMEOUT=${BQ_BROKER_TIMEOUT:-120}
PULSAR_TIMEOUT=${BQ_BROKER_TIMEOUT:-300}

SECURE_NAMES="redis-tls rabbitmq-tls postgres-tls kafka-tls artemis-tls pulsar-tls"
CLUSTER_NAMES="redis-sentinel redis-cluster artemis-ha kafka-cluster rabbitmq-cluster"
ALL_NAMES="redis rabbitmq kafka artemis sqs pulsar postgres $SECURE_NAMES $CLUSTER_NAMES"
# The default set (no names given): every broker, minus those in BQ_SKIP_BROKERS.
DEFAULT_NAMES="redis rabbitmq postgres kafka sqs artemis pulsar $SECURE_NAMES"
# Brokers whose failure does not fail `up` when they were not named explicitly (a warning instead).
SOFT_NAMES="pulsar pulsar-tls"

# Versions (all from Maven Central; see docs/brokers.md).
KAFKA_VERSION=${BQ_KAFKA_VERSION:-4.1.1}
ARTEMIS_VERSION=${BQ_ARTEMIS_VERSION:-2.40.0}
ELASTICMQ_VERSION=${BQ_ELASTICMQ_VERSION:-1.7.1}
PULSAR_VERSION=${BQ_PULSAR_VERSION:-4.0.8}

# Ports.
REDIS_PORT=6379
AMQP_PORT=5672
RABBIT_DIST_PORT=25672
KAFKA_PORT=9092
KAFKA_CONTROLLER_PORT=9093
ARTEMIS_AMQP_PORT=5673
ARTEMIS_CORE_PORT=61616
SQS_PORT=9324
PULSAR_PORT=6650
PULSAR_HTTP_PORT=8080
PG_PORT=5432

export DEBIAN_FRONTEND=noninteractive

say() { printf '%s\n' "$*" >&2; }
die() { say "brokers.sh: $*"; exit 1; }

is_root() { [ "$(id -u)" = 0 ]; }
# as_user USER cmd… — run as USER when we are root, as ourselves otherwise.
as_user() {
  local u=$1; shift
  if is_root && [ "$u" != root ]; then runuser -u "$u" -- "$@"; else "$@"; fi
}

java_bin() {
  if [ -n "${BQ_JAVA:-}" ]; then echo "$BQ_JAVA"; return; fi
  command -v java || echo /usr/bin/java
}

# ---------------------------------------------------------------------------
# generic helpers

pidfile() { echo "$STATE/$1.pid"; }
logfile() { echo "$STATE/$1.log"; }

pid_running() { # pid_running NAME -> 0 when the pid in its pid file runs (during start-up)
  local f; f=$(pidfile "$1")
  [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

pid_alive() { # pid_alive NAME -> 0 when the pid in its pid file runs and is that broker
  local f pid pat; f=$(pidfile "$1")
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || return 1
  case $1 in  # a pid file left from before a reboot may name some other process now
    redis|redis-tls) pat=redis-server ;; rabbitmq|rabbitmq-tls) pat=rabbitmq ;; postgres|postgres-tls) pat=postgres ;;
    kafka|kafka-tls) pat=kafka.Kafka ;; sqs) pat=elasticmq ;; artemis|artemis-tls|artemis-ha|artemis-ha-node*) pat=artemis ;; pulsar|pulsar-tls) pat=pulsar ;;
  esac
  [ -z "${pat:-}" ] || grep -qa "$pat" "/proc/$pid/cmdline" 2>/dev/null || [ ! -r "/proc/$pid/cmdline" ]
}

tcp_open() { # tcp_open PORT
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# tcp_exchange PORT HEX_REQUEST NBYTES -> hex of the first NBYTES answered
tcp_exchange() {
  local port=$1 req=$2 n=$3
  timeout 4 bash -c '
    exec 3<>/dev/tcp/127.0.0.1/'"$port"' || exit 1
    printf "$(printf %s "'"$req"'" | sed "s/\(..\)/\\\\x\1/g")" >&3
    head -c '"$n"' <&3 | od -An -v -tx1 | tr -d " \n"
  ' 2>/dev/null
}

tail_log() {
  local name=$1 f; f=$(logfile "$name")
  say "---- last lines of $f ----"
  if [ -f "$f" ]; then tail -n 40 "$f" >&2; else say "(no log)"; fi
  say "----"
}

# wait_for NAME — poll NAME_probe until it answers, TIMEOUT seconds at most.
wait_for() {
  local name=$1 start=$SECONDS TIMEOUT=$TIMEOUT
  [ "${name%-tls}" = pulsar ] && TIMEOUT=$PULSAR_TIMEOUT
  while :; do
    if "${name}_probe"; then return 0; fi
    if [ "$(type -t "${name}_died")" = function ] && "${name}_died"; then
      say "$name: the process exited during start-up"
      tail_log "$name"; return 1
    fi
    if (( SECONDS - start >= TIMEOUT )); then
      say "$name: no answer after ${TIMEOUT}s"
      tail_log "$name"; return 1
    fi
    sleep 1
  done
}

# stop_pid NAME — TERM the pid in NAME's pid file, KILL after 30 s.
stop_pid() {
  local name=$1 f pid i
  f=$(pidfile "$name")
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      say "$name: still running after 30s, sending KILL"
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$f"
}

# start_bg NAME DIR cmd… — start a daemon in its own session, log to NAME.log, record its pid.
start_bg() {
  local name=$1 dir=$2; shift 2
  ( cd "$dir" && exec setsid nohup "$@" </dev/null >>"$(logfile "$name")" 2>&1 8>&- ) &
  echo $! >"$(pidfile "$name")"
}

# ---------------------------------------------------------------------------
# installation: Debian packages (one apt-get for everything missing) and Maven

APT_UPDATED=0
apt_install() { # apt_install pkg… (only those missing)
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if ! is_root; then command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"; sudo="sudo -E"; fi
  say "installing Debian packages: ${missing[*]}"
  if [ $APT_UPDATED = 0 ]; then $sudo apt-get update -q >&2 || die "apt-get update failed"; APT_UPDATED=1; fi
  # Debian's postinst scripts try to start services; there is no init system to do it, and we
  # start them ourselves, so forbid it for the length of the install.
  local prc=/usr/sbin/policy-rc.d created=0
  if is_root && [ ! -e $prc ]; then printf '#!/bin/sh\nexit 101\n' >$prc; chmod +x $prc; created=1; fi
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  local rc=$?
  [ $created = 1 ] && rm -f $prc
  [ $rc = 0 ] || die "apt-get install ${missing[*]} failed"
}

debian_packages_for() { # the Debian packages the named brokers need
  local n pk=()
  command -v curl >/dev/null || pk+=(curl)
  command -v flock >/dev/null || pk+=(util-linux)
  for n in "$@"; do
    case $n in *-tls) command -v openssl >/dev/null || pk+=(openssl) ;; esac
    case ${n%-tls} in
      redis|redis-sentinel|redis-cluster) pk+=(redis-server redis-tools) ;;
      rabbitmq|rabbitmq-cluster) pk+=(rabbitmq-server) ;;
      postgres) command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || pk+=(postgresql) ;;
      kafka|artemis|sqs|pulsar|artemis-ha)
        [ -n "${BQ_JAVA:-}" ] || command -v java >/dev/null || pk+=(openjdk-17-jre-headless)
        command -v mvn >/dev/null || pk+=(maven) ;;
    esac
  done
  printf '%s\n' "${pk[@]}" | sort -u
}

# mvn_fetch POM OUTDIR — resolve a pom's dependencies into OUTDIR (serialised: one mvn at a time).
mvn_fetch() {
  local pom=$1 out=$2; shift 2
  mkdir -p "$CACHE"
  (
    flock 9
    mvn -B -q -Dstyle.color=never ${BQ_M2_REPO:+-Dmaven.repo.local="$BQ_M2_REPO"} -f "$pom" -DoutputDirectory="$out" "$@" dependency:copy-dependencies
  ) 9>"$CACHE/.mvn.lock"
}

# mvn_copy GAV OUTDIR — copy one artifact (g:a:v[:type[:classifier]]) into OUTDIR.
mvn_copy() {
  local gav=$1 out=$2
  mkdir -p "$CACHE" "$out"
  (
    flock 9
    mvn -B -q -Dstyle.color=never ${BQ_M2_REPO:+-Dmaven.repo.local="$BQ_M2_REPO"} -f "$ASSETS/empty-pom.xml" dependency:copy -Dartifact="$gav" -DoutputDirectory="$out" -Dmdep.useBaseVersion=true
  ) 9>"$CACHE/.mvn.lock"
}

# ---------------------------------------------------------------------------
# redis

redis_probe() { [ "$(timeout 3 redis-cli -h 127.0.0.1 -p $REDIS_PORT ping 2>/dev/null)" = PONG ]; }
redis_died() { ! pid_running redis; }
redis_start() {
  mkdir -p "$STATE/redis"
  : >>"$(logfile redis)"
  redis-server --port $REDIS_PORT --bind 127.0.0.1 --protected-mode yes \
    --daemonize yes --pidfile "$(pidfile redis)" --logfile "$(logfile redis)" \
    --dir "$STATE/redis" --save "" --appendonly no --maxmemory 256mb 8>&- \
    || return 1
  local i; for i in $(seq 1 20); do [ -s "$(pidfile redis)" ] && break; sleep 0.1; done
}
redis_stop() {
  pid_alive redis && timeout 10 redis-cli -h 127.0.0.1 -p $REDIS_PORT shutdown nosave >/dev/null 2>&1
  stop_pid redis
}
redis_url() { echo "BQ_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0"; }
redis_ports() { echo "$REDIS_PORT"; }

# ---------------------------------------------------------------------------
# rabbitmq (Debian's rabbitmq-server, run as the rabbitmq user, not through systemd)

rabbit_env() { # the environment the rabbitmq server and CLI tools share
  local home=/var/lib/rabbitmq
  is_root || home=$STATE/rabbitmq
  RABBIT_ENV=(
    "PATH=$PATH" "HOME=$home"
    RABBITMQ_NODENAME=rabbit@localhost
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    "RABBITMQ_NODE_PORT=$AMQP_PORT"
    "RABBITMQ_DIST_PORT=$RABBIT_DIST_PORT"
    ERL_EPMD_ADDRESS=127.0.0.1
    "RABBITMQ_MNESIA_BASE=$STATE/rabbitmq/mnesia"
    "RABBITMQ_LOG_BASE=$STATE/rabbitmq/log"
    RABBITMQ_LOGS=-
    "RABBITMQ_PID_FILE=$STATE/rabbitmq/rabbitmq.pid"
    "RABBITMQ_ENABLED_PLUGINS_FILE=$STATE/rabbitmq/enabled_plugins"
    "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"
  )
}

# AMQP 0-9-1: send the protocol header, expect a Connection.Start method frame (type 1, channel 0).
rabbitmq_probe() { [ "$(tcp_exchange $AMQP_PORT 414d515000000901 3)" = 010000 ]; }
rabbitmq_died() { ! pid_running rabbitmq; }
rabbitmq_start() {
  mkdir -p "$STATE/rabbitmq/mnesia" "$STATE/rabbitmq/log"
  [ -f "$STATE/rabbitmq/enabled_plugins" ] || echo '[].' >"$STATE/rabbitmq/enabled_plugins"
  is_root && chown -R rabbitmq:rabbitmq "$STATE/rabbitmq"
  rabbit_env
  local cmd=(env -i "${RABBIT_ENV[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server)
  is_root && cmd=(runuser -u rabbitmq -- "${cmd[@]}")
  start_bg rabbitmq "$STATE/rabbitmq" "${cmd[@]}"
}
rabbitmq_stop() {
  if pid_alive rabbitmq; then
    rabbit_env
    (cd /tmp && as_user rabbitmq env -i "${RABBIT_ENV[@]}" timeout 60 /usr/lib/rabbitmq/bin/rabbitmqctl -q shutdown >/dev/null 2>&1) || true
  fi
  stop_pid rabbitmq
}
rabbitmq_url() { echo "BQ_AMQP_URL=amqp://guest:guest@127.0.0.1:$AMQP_PORT/"; }
rabbitmq_ports() { echo "$AMQP_PORT"; }

# ---------------------------------------------------------------------------
# postgres (Debian's PostgreSQL binaries, a private cluster under $STATE)

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -n "$d" ]; then echo "$d"; else dirname "$(command -v pg_ctl)"; fi
}
PGDATA_DIR() { echo "$STATE/postgres/data"; }
PGSOCK_DIR() { echo "$STATE/postgres/run"; }
pg_owner() { if is_root; then echo postgres; else id -un; fi; }

postgres_probe() {
  pg_isready -q -h 127.0.0.1 -p $PG_PORT -t 2 2>/dev/null || return 1
  PGPASSWORD=babelqueue PGCONNECT_TIMEOUT=3 psql -qtAX -h 127.0.0.1 -p $PG_PORT -U babelqueue -d babelqueue \
    -c 'select 1' >/dev/null 2>&1
}
postgres_died() { ! pid_running postgres; }
postgres_start() {
  local bin owner data sock
  bin=$(pg_bin); owner=$(pg_owner); data=$(PGDATA_DIR); sock=$(PGSOCK_DIR)
  mkdir -p "$STATE/postgres" "$sock"
  : >>"$(logfile postgres)"
  if is_root; then chown "$owner" "$STATE/postgres" "$sock" "$(logfile postgres)"; fi
  if [ ! -s "$data/PG_VERSION" ]; then
    as_user "$owner" "$bin/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
      -E UTF8 --locale=C.UTF-8 >>"$(logfile postgres)" 2>&1 \
      || as_user "$owner" "$bin/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
      -E UTF8 --no-locale >>"$(logfile postgres)" 2>&1 || return 1
    cat >>"$data/postgresql.conf" <<EOF
# babelqueue test broker (scripts/brokers.sh)
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$sock'
shared_buffers = 32MB
max_connections = 100
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  fi
  as_user "$owner" "$bin/pg_ctl" -D "$data" -l "$(logfile postgres)" -w -t "$TIMEOUT" start >/dev/null 8>&- || return 1
  head -1 "$data/postmaster.pid" >"$(pidfile postgres)"
  # role and database (idempotent)
  as_user "$owner" psql -qX -h "$sock" -p $PG_PORT -U postgres -d postgres -v ON_ERROR_STOP=1 >/dev/null <<'SQL' || return 1
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'babelqueue') THEN
    CREATE ROLE babelqueue LOGIN PASSWORD 'babelqueue' CREATEDB;
  END IF;
END $$;
SELECT 'CREATE DATABASE babelqueue OWNER babelqueue'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'babelqueue') \gexec
SQL
}
postgres_stop() {
  local data; data=$(PGDATA_DIR)
  if pid_alive postgres; then
    as_user "$(pg_owner)" "$(pg_bin)/pg_ctl" -D "$data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  fi
  stop_pid postgres
}
postgres_url() { echo "BQ_POSTGRES_URL=postgres://babelqueue:babelqueue@127.0.0.1:$PG_PORT/babelqueue?sslmode=disable"; }
postgres_ports() { echo "$PG_PORT"; }

# ---------------------------------------------------------------------------
# JVM brokers
for f in kafka sqs artemis pulsar secure; do . "$ASSETS/$f.sh"; done
# Clusters: one file each, defining NAME_up (start what is missing, form, wait), NAME_stop,
# NAME_running, NAME_probe, NAME_url, NAME_ports and the node control NAME_node_ACTION.
for f in "$ASSETS"/*-cluster.sh; do . "$f"; done

# ---------------------------------------------------------------------------
# commands

first_port() { local p; p=$("${1}_ports"); echo "${p%% *}"; }

known() { case " $ALL_NAMES " in *" $1 "*) return 0 ;; esac; return 1; }

# running NAME — a process of NAME runs: a cluster says so itself (NAME_running), a
# broker of one process by its pid file.
running() {
  if [ "$(type -t "${1}_running")" = function ]; then "${1}_running"; else pid_alive "$1"; fi
}

# up_one NAME — prepare (download) if needed, start, wait. A cluster does it all in NAME_up.
up_one() {
  local name=$1 t0=$SECONDS
  if [ "$(type -t "${name}_up")" = function ]; then "${name}_up"; return; fi
  if "${name}_probe"; then
    if [ "$(type -t "${name}_setup")" = function ] && ! "${name}_setup"; then say "$name: setting it up failed"; return 1; fi
    say "$name: already up"; return 0
  fi
  if pid_alive "$name"; then
    say "$name: process running (pid $(cat "$(pidfile "$name")")), waiting for it to answer"
    wait_for "$name" || return 1
    say "$name: up ($((SECONDS - t0))s)"; return 0
  fi
  [ -s "$(logfile "$name")" ] && mv -f "$(logfile "$name")" "$(logfile "$name").prev"
  if [ "$(type -t "${name}_prepare")" = function ]; then
    # One prepare at a time per distribution: a broker and its secure variant share it.
    ( flock 7; "${name}_prepare" ) 7>"$CACHE/.prepare-${name%-tls}.lock" \
      || { say "$name: preparing failed"; tail_log "$name"; return 1; }
  fi
  # a listener we do not own on the port?
  local p
  for p in $("${name}_ports"); do
    if tcp_open "$p"; then
      say "$name: port 127.0.0.1:$p is taken by another process and it does not answer as $name"
      return 1
    fi
  done
  # Two tries: a first start on a fresh machine can fail for a reason of the moment (a
  # port still held by a process that just ended, a JVM slower than its timeout); the
  # cause of the first failure is printed either way.
  local try
  for try in 1 2; do
    if [ "$try" = 1 ]; then say "$name: starting"; else say "$name: starting again (second try)"; fi
    if ! "${name}_start"; then
      say "$name: start failed"; tail_log "$name"; pid_running "$name" && "${name}_stop"
    elif ! wait_for "$name"; then
      pid_running "$name" && { say "$name: stopping the failed start"; "${name}_stop" >/dev/null 2>&1; }
    elif [ "$(type -t "${name}_setup")" = function ] && ! "${name}_setup"; then
      # users, permissions, ACLs the broker needs once it answers (idempotent)
      say "$name: setting it up failed"; tail_log "$name"; "${name}_stop" >/dev/null 2>&1
    else
      say "$name: up on 127.0.0.1:$(first_port "$name") ($((SECONDS - t0))s)"
      return 0
    fi
    [ -s "$(logfile "$name")" ] && mv -f "$(logfile "$name")" "$(logfile "$name").failed"
  done
  return 1
}

cmd_up() {
  local names=("$@") n
  mkdir -p "$STATE" "$CACHE"
  chmod 755 "$STATE" 2>/dev/null
  mapfile -t pk < <(debian_packages_for "${names[@]}")
  [ ${#pk[@]} -gt 0 ] && [ -n "${pk[0]}" ] && apt_install "${pk[@]}"
  # The secure variants' certificates, once, before they start side by side.
  if [[ " ${names[*]} " == *-tls\ * ]]; then ensure_certs || die "scripts/certs.sh failed"; fi
  local pids=() rc=0 i
  for n in "${names[@]}"; do
    ( set -o pipefail; up_one "$n" 2>&1 | sed -u "s/^/[$n] /" ) &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      n=${names[$i]}
      if [ "$BQ_EXPLICIT" = 0 ] && [[ " $SOFT_NAMES " == *" $n "* ]]; then
        say "[$n] FAILED — not fatal because $n was not named; \`env\` leaves its URL out. Run \`$0 up $n\` to make it fatal."
      else
        rc=1; say "[$n] FAILED"
      fi
    fi
  done
  return $rc
}

cmd_down() {
  local n
  for n in "$@"; do
    if running "$n"; then say "$n: stopping"; "${n}_stop"; say "$n: stopped"
    else rm -f "$(pidfile "$n")"; say "$n: not running (from this script)"; fi
  done
}

cmd_status() {
  local n rc=0 pid
  for n in "$@"; do
    pid=""; pid_alive "$n" && pid="pid $(cat "$(pidfile "$n")")"
    [ -z "$pid" ] && running "$n" && pid="(nodes under $STATE/$n)"
    if "${n}_probe"; then
      printf '%-12s up    127.0.0.1:%-6s %s\n' "$n" "$(first_port "$n")" "${pid:-(not started by this script)}"
    else
      printf '%-12s down  127.0.0.1:%-6s %s\n' "$n" "$(first_port "$n")" "$pid"; rc=3
    fi
  done
  return $rc
}

cmd_env() {
  local n line any_sqs=0 any_tls=0
  for n in "$@"; do
    if [ "$n" = pulsar ] && ! pulsar_probe; then continue; fi
    if [ "$n" = pulsar-tls ] && ! pulsar-tls_probe; then continue; fi
    line=$("${n}_url"); echo "export $line"
    [ "$n" = sqs ] && any_sqs=1
    case $n in *-tls) any_tls=1 ;; esac
  done
  [ $any_tls = 1 ] && echo "export BQ_TLS_DIR=$(TLS_DIR)"
  if [ $any_sqs = 1 ]; then
    echo "export AWS_ACCESS_KEY_ID=x"
    echo "export AWS_SECRET_ACCESS_KEY=x"
    echo "export AWS_REGION=us-east-1"
    echo "export AWS_DEFAULT_REGION=us-east-1"
  fi
}

# One `up`/`down` at a time per state dir: a second caller waits, then finds the brokers up.
take_lock() {
  mkdir -p "$STATE"
  exec 8>"$STATE/.lock"
  if ! flock -n 8; then
    say "brokers.sh: another brokers.sh up/down is running on $STATE; waiting for it"
    flock -w 1800 8 || die "gave up waiting for the lock $STATE/.lock"
  fi
}

# cmd_node NAME ACTION [ARG] — one node of a cluster: NAME_node_ACTION N (kill, stop,
# start), or NAME_leader [ARG] (the node number leading ARG, or the cluster).
cmd_node() {
  local name=${1:-} action=${2:-}
  known "$name" || die "unknown broker '$name' (known: $ALL_NAMES)"
  case $action in
    leader) [ "$(type -t "${name}_leader")" = function ] || die "$name cannot say which node leads"
      "${name}_leader" "${@:3}" ;;
    *) [ "$(type -t "${name}_node_${action}")" = function ] || die "$name has no node action '$action'"
      [ -n "${3:-}" ] || die "node $name $action: which node (a number)?"
      "${name}_node_${action}" "$3" ;;
  esac
}

main() {
  local cmd=${1:-}; shift || true
  if [ "$cmd" = node ]; then cmd_node "$@"; return; fi
  local names=() explicit=0 n
  if [ $# -gt 0 ]; then
    explicit=1
    for n in "$@"; do known "$n" || die "unknown broker '$n' (known: $ALL_NAMES)"; names+=("$n"); done
  else
    for n in $DEFAULT_NAMES; do
      [[ " ${BQ_SKIP_BROKERS:-} " == *" $n "* ]] && continue
      names+=("$n")
    done
  fi
  BQ_EXPLICIT=$explicit
  case $cmd in
    up) take_lock; cmd_up "${names[@]}" ;;
    down) take_lock; cmd_down "${names[@]}" ;;
    status) cmd_status "${names[@]}" ;;
    env) cmd_env "${names[@]}" ;;
    *) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; [ -z "$cmd" ] || [ "$cmd" = help ] || [ "$cmd" = -h ] || exit 2 ;;
  esac
}

main "$@"
