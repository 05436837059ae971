# Clustered Redis for the tests (issue 35). Sourced by scripts/brokers.sh.
#
#   redis-sentinel  one primary (node 1, port 16379) and one replica (node 2, 16380), both
#                   with an append-only file, watched by three Sentinels (nodes 3-5, ports
#                   26379-26381) under the master name "bq"; failover after 1 s of silence.
#   redis-cluster   a Redis Cluster of three primaries and three replicas (nodes 1-6, ports
#                   17000-17005, bus ports 27000-27005), cluster-node-timeout 2 s, made by
#                   redis-cli --cluster create.
#
# Debian's redis-server in both (a Sentinel is redis-server --sentinel). Every process binds
# 127.0.0.1 and keeps its config, data, pid and log in $STATE/<name>/nodeN. `up` starts the
# nodes that are not running and waits until the whole set is formed and healthy; `node
# <name> kill|stop|start N` controls one node; `node <name> leader [KEY]` prints the node
# number of the primary (of KEY's slot in the cluster).
#
# A test that kills nodes runs a set of its own: BQ_STATE_DIR elsewhere and other ports,
# BQ_REDIS_SENTINEL_PORTS="<data 1> <data 2> <sentinel 1> <sentinel 2> <sentinel 3>" and
# BQ_REDIS_CLUSTER_PORTS="<six ports>" (a cluster node also listens on its port + 10000).

REDIS_SENTINEL_MASTER=bq
read -r -a _rs_ports <<<"${BQ_REDIS_SENTINEL_PORTS:-16379 16380 26379 26380 26381}"
REDIS_SENTINEL_DATA_PORTS=("${_rs_ports[@]:0:2}")
REDIS_SENTINEL_SENTINEL_PORTS=("${_rs_ports[@]:2:3}")
read -r -a REDIS_CLUSTER_PORTS <<<"${BQ_REDIS_CLUSTER_PORTS:-17000 17001 17002 17003 17004 17005}"

rc_ports() { # rc_ports NAME -> every node's port, node 1 first
  case $1 in
    redis-sentinel) echo "${REDIS_SENTINEL_DATA_PORTS[*]} ${REDIS_SENTINEL_SENTINEL_PORTS[*]}" ;;
    redis-cluster) echo "${REDIS_CLUSTER_PORTS[*]}" ;;
  esac
}
rc_port() { local p; read -r -a p <<<"$(rc_ports "$1")"; echo "${p[$(($2 - 1))]}"; }
rc_count() { local p; read -r -a p <<<"$(rc_ports "$1")"; echo "${#p[@]}"; }
rc_dir() { echo "$STATE/$1/node$2"; }
rc_cli() { timeout 5 redis-cli -h 127.0.0.1 -p "$1" "${@:2}" 2>/dev/null; }
rc_is_sentinel() { [ "$1" = redis-sentinel ] && [ "$2" -ge 3 ]; }

rc_alive() { # rc_alive NAME N -> 0 when node N's redis-server runs
  local f pid; f="$(rc_dir "$1" "$2")/redis.pid"
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null && grep -qa redis-server "/proc/$pid/cmdline" 2>/dev/null
}

# rc_conf NAME N — write node N's config the first time; Redis and Sentinel rewrite it later
# (CONFIG REWRITE after a failover, Sentinel's own state), so it is never written again.
rc_conf() {
  local name=$1 n=$2 dir port conf; dir=$(rc_dir "$name" "$n"); port=$(rc_port "$name" "$n")
  conf="$dir/redis.conf"
  mkdir -p "$dir"
  [ -s "$conf" ] && return 0
  {
    echo "port $port"
    echo "bind 127.0.0.1"
    echo "protected-mode yes"
    echo "dir $dir"
    echo "pidfile $dir/redis.pid"
    echo "logfile $dir/redis.log"
    if rc_is_sentinel "$name" "$n"; then
      echo "sentinel monitor $REDIS_SENTINEL_MASTER 127.0.0.1 ${REDIS_SENTINEL_DATA_PORTS[0]} 2"
      echo "sentinel down-after-milliseconds $REDIS_SENTINEL_MASTER 1000"
      echo "sentinel failover-timeout $REDIS_SENTINEL_MASTER 5000"
      echo "sentinel parallel-syncs $REDIS_SENTINEL_MASTER 1"
    else
      echo 'save ""'
      echo "appendonly yes"
      echo "appendfsync everysec"
      echo "maxmemory 128mb"
      echo "repl-diskless-sync yes"
      echo "repl-diskless-sync-delay 0"
      if [ "$name" = redis-cluster ]; then
        echo "cluster-enabled yes"
        echo "cluster-config-file $dir/nodes.conf"
        echo "cluster-node-timeout 2000"
        echo "cluster-require-full-coverage no"
      elif [ "$n" != 1 ]; then
        echo "replicaof 127.0.0.1 ${REDIS_SENTINEL_DATA_PORTS[0]}"
      fi
    fi
  } >"$conf"
}

# The port of the primary the Sentinels name (the first that answers), or nothing.
rc_sentinel_master_port() {
  local p out
  for p in "${REDIS_SENTINEL_SENTINEL_PORTS[@]}"; do
    out=$(rc_cli "$p" sentinel get-master-addr-by-name "$REDIS_SENTINEL_MASTER" | sed -n 2p)
    [ -n "$out" ] && { echo "$out"; return 0; }
  done
  return 1
}

# rc_node_start NAME N — start node N unless it runs (on its config and data).
rc_node_start() {
  local name=$1 n=$2 dir port args=(); dir=$(rc_dir "$name" "$n"); port=$(rc_port "$name" "$n")
  rc_alive "$name" "$n" && return 0
  if tcp_open "$port"; then say "$name: port 127.0.0.1:$port (node $n) is taken by another process"; return 1; fi
  rc_conf "$name" "$n"
  rm -f "$dir/redis.pid"
  if rc_is_sentinel "$name" "$n"; then
    args=(--sentinel)
  elif [ "$name" = redis-sentinel ]; then
    # A data node coming back after a failover follows the primary the Sentinels name: it
    # must never start as a primary of its own (its replica would sync to its old data).
    local mp; mp=$(rc_sentinel_master_port)
    if [ -n "$mp" ] && [ "$mp" != "$port" ]; then args=(--replicaof 127.0.0.1 "$mp"); fi
  fi
  redis-server "$dir/redis.conf" "${args[@]}" --daemonize yes 8>&- >>"$dir/redis.log" 2>&1 || return 1
  local i; for i in $(seq 1 50); do rc_alive "$name" "$n" && return 0; sleep 0.1; done
  say "$name: node $n did not start; its log:"; tail -n 20 "$dir/redis.log" >&2; return 1
}

# rc_node_kill NAME N — SIGKILL node N (no shutdown, no save).
rc_node_kill() {
  local f; f="$(rc_dir "$1" "$2")/redis.pid"
  rc_alive "$1" "$2" || return 0
  kill -KILL "$(cat "$f")"
  local i; for i in $(seq 1 50); do rc_alive "$1" "$2" || break; sleep 0.1; done
  rm -f "$f"
}

# rc_node_stop NAME N — graceful SHUTDOWN of node N (a primary saves its append-only file).
rc_node_stop() {
  local f pid i; f="$(rc_dir "$1" "$2")/redis.pid"
  rc_alive "$1" "$2" || return 0
  pid=$(cat "$f")
  rc_cli "$(rc_port "$1" "$2")" shutdown >/dev/null
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$f"
}

rc_running() { local n; for n in $(seq 1 "$(rc_count "$1")"); do rc_alive "$1" "$n" && return 0; done; return 1; }

rc_up() { # start every node not running, form the cluster, wait until healthy
  local name=$1 n t0=$SECONDS
  if "${name}_probe"; then say "$name: already up"; return 0; fi
  mkdir -p "$STATE/$name"
  for n in $(seq 1 "$(rc_count "$name")"); do rc_node_start "$name" "$n" || return 1; done
  if [ "$name" = redis-cluster ]; then redis-cluster_form || return 1; fi
  while ! "${name}_probe"; do
    if (( SECONDS - t0 >= TIMEOUT )); then
      say "$name: not healthy after ${TIMEOUT}s"
      for n in $(seq 1 "$(rc_count "$name")"); do say "-- node $n:"; tail -n 8 "$(rc_dir "$name" "$n")/redis.log" >&2; done
      return 1
    fi
    sleep 0.5
  done
  say "$name: up on 127.0.0.1:$(rc_port "$name" 1) ($((SECONDS - t0))s)"
}

rc_down() { # Sentinels first (no failover while the data nodes go), then replicas, then primaries
  local name=$1 n order=()
  if [ "$name" = redis-sentinel ]; then order=(5 4 3 2 1); else order=(6 5 4 3 2 1); fi
  for n in "${order[@]}"; do rc_node_stop "$name" "$n"; done
}

# ---------------------------------------------------------------------------
# redis-sentinel

# Healthy: every node answers, the Sentinels agree on one primary, which has its replica
# online, and each Sentinel knows the two others and the replica.
redis-sentinel_probe() {
  local p mp info
  for p in $(rc_ports redis-sentinel); do [ "$(rc_cli "$p" ping)" = PONG ] || return 1; done
  mp=$(rc_sentinel_master_port) || return 1
  info=$(rc_cli "$mp" info replication)
  grep -q '^role:master' <<<"$info" && grep -q '^slave0:.*state=online' <<<"$info" || return 1
  for p in "${REDIS_SENTINEL_SENTINEL_PORTS[@]}"; do
    [ "$(rc_cli "$p" sentinel get-master-addr-by-name "$REDIS_SENTINEL_MASTER" | sed -n 2p)" = "$mp" ] || return 1
    info=$(rc_cli "$p" sentinel master "$REDIS_SENTINEL_MASTER" | paste - -)
    grep -qP '^num-other-sentinels\t2$' <<<"$info" && grep -qP '^num-slaves\t[1-9]' <<<"$info" \
      && grep -qP '^flags\tmaster$' <<<"$info" || return 1
  done
}
redis-sentinel_up() { rc_up redis-sentinel; }
redis-sentinel_stop() { rc_down redis-sentinel; }
redis-sentinel_running() { rc_running redis-sentinel; }
redis-sentinel_ports() { rc_ports redis-sentinel; }
redis-sentinel_url() {
  local p hosts=()
  for p in "${REDIS_SENTINEL_SENTINEL_PORTS[@]}"; do hosts+=("127.0.0.1:$p"); done
  echo "BQ_REDIS_SENTINEL_URL=redis://$(IFS=,; echo "${hosts[*]}")/0?sentinel=$REDIS_SENTINEL_MASTER"
}
redis-sentinel_node_kill() { rc_node_kill redis-sentinel "$1"; }
redis-sentinel_node_stop() { rc_node_stop redis-sentinel "$1"; }
redis-sentinel_node_start() { rc_node_start redis-sentinel "$1"; }
redis-sentinel_leader() { # the node number of the primary the Sentinels name
  local mp n; mp=$(rc_sentinel_master_port) || return 1
  for n in 1 2; do [ "$(rc_port redis-sentinel $n)" = "$mp" ] && { echo $n; return 0; }; done
  return 1
}

# ---------------------------------------------------------------------------
# redis-cluster

# Healthy: every node says cluster_state:ok, knows six nodes with every slot assigned, and
# three primaries each have a replica online.
redis-cluster_probe() {
  local p info masters
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    info=$(rc_cli "$p" cluster info) || return 1
    grep -q '^cluster_state:ok' <<<"$info" && grep -q '^cluster_slots_assigned:16384' <<<"$info" \
      && grep -q '^cluster_known_nodes:6' <<<"$info" || return 1
  done
  masters=$(rc_cli "${REDIS_CLUSTER_PORTS[0]}" cluster nodes | awk '$3 ~ /master/ && $3 !~ /fail/ && NF > 8' | wc -l)
  [ "$masters" = 3 ] || return 1
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    info=$(rc_cli "$p" info replication)
    if grep -q '^role:master' <<<"$info"; then grep -q '^slave0:.*state=online' <<<"$info" || return 1; fi
  done
}
# Create the cluster once every node runs and none has slots yet.
redis-cluster_form() {
  local p addrs=() assigned
  assigned=$(rc_cli "${REDIS_CLUSTER_PORTS[0]}" cluster info | tr -d '\r' | sed -n 's/^cluster_slots_assigned://p')
  [ "${assigned:-0}" != 0 ] && return 0
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do addrs+=("127.0.0.1:$p"); done
  say "redis-cluster: creating the cluster"
  timeout 60 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >>"$STATE/redis-cluster/create.log" 2>&1 \
    || { say "redis-cluster: redis-cli --cluster create failed:"; tail -n 20 "$STATE/redis-cluster/create.log" >&2; return 1; }
}
redis-cluster_up() { rc_up redis-cluster; }
redis-cluster_stop() { rc_down redis-cluster; }
redis-cluster_running() { rc_running redis-cluster; }
redis-cluster_ports() { rc_ports redis-cluster; }
redis-cluster_url() {
  local p hosts=()
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do hosts+=("127.0.0.1:$p"); done
  echo "BQ_REDIS_CLUSTER_URL=redis://$(IFS=,; echo "${hosts[*]}")?cluster=1"
}
redis-cluster_node_kill() { rc_node_kill redis-cluster "$1"; }
redis-cluster_node_stop() { rc_node_stop redis-cluster "$1"; }
redis-cluster_node_start() { rc_node_start redis-cluster "$1"; }
redis-cluster_leader() { # the node number of the primary that owns KEY's slot (default: slot 0)
  local slot=0 port n p
  if [ -n "${1:-}" ]; then
    slot=""
    for p in "${REDIS_CLUSTER_PORTS[@]}"; do slot=$(rc_cli "$p" cluster keyslot "$1") && [ -n "$slot" ] && break; done
    [ -n "$slot" ] || return 1
  fi
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    port=$(rc_cli "$p" cluster nodes | awk -v s="$slot" '$3 ~ /master/ && $3 !~ /fail/ {
      for (i = 9; i <= NF; i++) { split($i, r, "-"); if (r[2] == "") r[2] = r[1]; if (s >= r[1] && s <= r[2]) { split($2, a, "[:@]"); print a[2]; exit } } }')
    [ -n "$port" ] && break
  done
  for n in $(seq 1 "$(rc_count redis-cluster)"); do [ "$(rc_port redis-cluster "$n")" = "$port" ] && { echo "$n"; return 0; }; done
  return 1
}
