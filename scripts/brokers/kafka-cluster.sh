# Apache Kafka, a cluster of three KRaft nodes (each a combined broker + controller, a
# 3-voter quorum), for the cluster tests (issue 35). Sourced by scripts/brokers.sh; the
# same distribution as the single node (scripts/brokers/kafka.sh), each node its own JVM
# (-Xmx384m), ports and data directory under $STATE/kafka-cluster/nodeN. Topics get
# replication factor 3 and min.insync.replicas=2, so one node may die without a write
# acknowledged by acks=all being lost or the cluster refusing writes.
#
#   scripts/brokers.sh up kafka-cluster               start the nodes missing, wait for all three (kafka-cluster_up)
#   scripts/brokers.sh node kafka-cluster kill 2      kill -9 node 2 (stop: SIGTERM, a controlled shutdown)
#   scripts/brokers.sh node kafka-cluster start 2     start node 2 again on its data
#   scripts/brokers.sh node kafka-cluster leader T [P]  the node leading partition P (default 0) of topic T
#
# Node N (1-3) listens on 127.0.0.1:KCLUSTER_BASE+2N (clients) and +2N+1 (controller):
# 19192/19193, 19194/19195, 19196/19197 by default.

KCLUSTER_BASE=${BQ_KAFKA_CLUSTER_BASE_PORT:-19190}
KCLUSTER_NODES="1 2 3"

kcluster_dir() { echo "$STATE/kafka-cluster"; }
kcluster_port() { echo $((KCLUSTER_BASE + 2 * $1)); }
kcluster_ctrl_port() { echo $((KCLUSTER_BASE + 2 * $1 + 1)); }
kcluster_pidfile() { echo "$(kcluster_dir)/node$1/kafka.pid"; }
kcluster_log() { echo "$(kcluster_dir)/node$1/node.log"; }

kcluster_node_alive() { # kcluster_node_alive N -> 0 when node N's process runs
  local f pid; f=$(kcluster_pidfile "$1")
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null && grep -qa kafka.Kafka "/proc/$pid/cmdline" 2>/dev/null
}

# Metadata v4 (all topics) to node N: 0 when it answers and lists all three brokers (a
# fenced or unregistered broker is left out of the metadata).
kcluster_node_probe() {
  local r; r=$(tcp_exchange "$(kcluster_port "$1")" 00000011000300040000bb0100026271ffffffff00 16 2>/dev/null) || return 1
  [ "${r:8:8}" = 0000bb01 ] && [ "${r:24:8}" = 00000003 ] && [ ${#r} -eq 32 ]
}

kafka-cluster_probe() {
  local n; for n in $KCLUSTER_NODES; do kcluster_node_probe "$n" || return 1; done
}
kafka-cluster_ports() { # the ports of the nodes not running (those must be free)
  local n; for n in $KCLUSTER_NODES; do
    kcluster_node_alive "$n" || printf '%s %s ' "$(kcluster_port "$n")" "$(kcluster_ctrl_port "$n")"
  done
}
kafka-cluster_url() {
  local n hosts=()
  for n in $KCLUSTER_NODES; do hosts+=("127.0.0.1:$(kcluster_port "$n")"); done
  echo "BQ_KAFKA_CLUSTER_URL=kafka://$(IFS=,; echo "${hosts[*]}")"
}

# kafka-cluster_up — start the nodes not running (a fresh cluster when none is) and wait
# until all three are in the cluster; brokers.sh up calls it for the whole start.
kafka-cluster_up() {
  local t0=$SECONDS p n
  if kafka-cluster_probe; then say "kafka-cluster: already up"; return 0; fi
  ( flock 7; kafka_prepare ) 7>"$CACHE/.prepare-kafka.lock" || { say "kafka-cluster: preparing the Kafka distribution failed"; return 1; }
  for p in $(kafka-cluster_ports); do
    if tcp_open "$p"; then say "kafka-cluster: port 127.0.0.1:$p is taken by another process"; return 1; fi
  done
  say "kafka-cluster: starting the nodes not running"
  kafka-cluster_start || { say "kafka-cluster: start failed"; return 1; }
  if ! wait_for kafka-cluster; then
    for n in $KCLUSTER_NODES; do say "---- end of $(kcluster_log "$n")"; tail -n 15 "$(kcluster_log "$n")" >&2; done
    return 1
  fi
  say "kafka-cluster: up on 127.0.0.1:$(kcluster_port 1),$(kcluster_port 2),$(kcluster_port 3) ($((SECONDS - t0))s)"
}

kcluster_jvm() {
  local n=$1 d; d="$(kcluster_dir)/node$n"
  KCLUSTER_JVM=(-Xms128m -Xmx384m -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    -XX:MaxDirectMemorySize=128m -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
    -Dlog4j2.configurationFile="$ASSETS/log4j2.properties" -Dkafka.logs.dir="$d"
    -cp "$(kafka_home)/libs/*")
}

# kcluster_format N ID — write node N's server.properties and format its log directory.
kcluster_format() {
  local n=$1 id=$2 d voters="" m
  d="$(kcluster_dir)/node$n"
  for m in $KCLUSTER_NODES; do voters+="${voters:+,}$m@127.0.0.1:$(kcluster_ctrl_port "$m")"; done
  rm -rf "$d/data"; mkdir -p "$d/data"
  sed -e "s|@NODE@|$n|g" -e "s|@PORT@|$(kcluster_port "$n")|g" -e "s|@CONTROLLER_PORT@|$(kcluster_ctrl_port "$n")|g" \
      -e "s|@VOTERS@|$voters|g" -e "s|@LOG_DIRS@|$d/data|g" \
      "$ASSETS/kafka-cluster.properties" >"$d/server.properties" || return 1
  kcluster_jvm "$n"
  "$(java_bin)" "${KCLUSTER_JVM[@]}" kafka.tools.StorageTool format --cluster-id="$id" -c "$d/server.properties" \
    >>"$(kcluster_log "$n")" 2>&1
}

# kafka-cluster_node_start N — start node N on its data (`up` formats it first).
kafka-cluster_node_start() {
  local n=$1 d; d="$(kcluster_dir)/node$n"
  kcluster_node_alive "$n" && return 0
  [ -s "$(kcluster_dir)/cluster.id" ] && [ -f "$d/data/meta.properties" ] \
    || { say "kafka-cluster: node $n has no data; start the cluster with \`up kafka-cluster\`"; return 1; }
  kcluster_jvm "$n"
  ( cd "$d" && exec setsid nohup "$(java_bin)" "${KCLUSTER_JVM[@]}" kafka.Kafka "$d/server.properties" \
      </dev/null >>"$(kcluster_log "$n")" 2>&1 8>&- ) &
  echo $! >"$(kcluster_pidfile "$n")"
}

# kafka-cluster_node_kill N — SIGKILL node N (its pid file stays for node_start).
kafka-cluster_node_kill() {
  kcluster_node_alive "$1" || return 0
  local pid; pid=$(cat "$(kcluster_pidfile "$1")")
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

# kafka-cluster_node_stop N — SIGTERM node N (a controlled shutdown: its partitions'
# leadership moves first), KILL after 60 s.
kafka-cluster_node_stop() {
  kcluster_node_alive "$1" || return 0
  local pid i; pid=$(cat "$(kcluster_pidfile "$1")")
  kill -TERM "$pid"
  for i in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  say "kafka-cluster: node $1 still running after 60s, sending KILL"
  kill -KILL "$pid"
}

# kafka-cluster_leader TOPIC [PARTITION] — the node id leading a partition (0 by
# default) of TOPIC, read from a Metadata v4 answer (no auto-creation) of the first node
# that answers.
kafka-cluster_leader() {
  local topic=$1 part=${2:-0} n hex req len
  hex=$(printf %s "$topic" | od -An -v -tx1 | tr -d ' \n')
  len=${#topic}
  # api_key=3 version=4 correlation=0xbb02 client_id="bq" topics=[topic] auto_create=false
  req=$(printf '000300040000bb0200026271%08x%04x%s00' 1 "$len" "$hex")
  req=$(printf '%08x%s' $(( ${#req} / 2 )) "$req")
  for n in $KCLUSTER_NODES; do
    r=$(kcluster_exchange "$(kcluster_port "$n")" "$req") || continue
    [ -n "$r" ] && kcluster_parse_leader "$r" "$part" && return 0
  done
  return 1
}

# kcluster_exchange PORT HEX_REQUEST -> hex of the whole answer (its size prefix read first)
kcluster_exchange() {
  timeout 4 bash -c '
    exec 3<>/dev/tcp/127.0.0.1/'"$1"' || exit 1
    printf "$(printf %s "'"$2"'" | sed "s/\(..\)/\\\\x\1/g")" >&3
    size=$(dd bs=1 count=4 <&3 2>/dev/null | od -An -v -tu1 | awk "{print \$1*16777216+\$2*65536+\$3*256+\$4}")
    [ -n "$size" ] && [ "$size" -gt 0 ] || exit 1
    printf "%08x" "$size"
    dd bs="$size" count=1 iflag=fullblock <&3 2>/dev/null | od -An -v -tx1 | tr -d " \n"
  ' 2>/dev/null
}

# kcluster_parse_leader HEX PARTITION — the leader of PARTITION in a Metadata v4 answer
# (size, correlation id, throttle time, brokers, cluster id, controller id, topics).
kcluster_parse_leader() {
  local r=$1 want=$2 i=24 v nb b np p id leader
  # Readers of the hex at i: each sets v and moves i past what it read.
  u32() { v=$((16#${r:$i:8})); i=$((i + 8)); }
  u16() { v=$((16#${r:$i:4})); i=$((i + 4)); }
  str() { u16; [ "$v" = 65535 ] || i=$((i + 2 * v)); }
  arr() { u32; i=$((i + 8 * v)); } # an array of int32
  [ ${#r} -ge 32 ] || return 1
  u32; nb=$v
  for ((b = 0; b < nb; b++)); do i=$((i + 8)); str; i=$((i + 8)); str; done # id host port rack
  str; i=$((i + 8)) # cluster id, controller id
  u32; [ "$v" -ge 1 ] || return 1 # topics
  u16; [ "$v" = 0 ] || return 1   # the topic's error
  str; i=$((i + 2)) # name, is_internal
  u32; np=$v
  for ((p = 0; p < np; p++)); do
    i=$((i + 4)); u32; id=$v; u32; leader=$v # error, partition, leader
    arr; arr # replicas, isr
    if [ "$id" = "$want" ]; then echo "$leader"; return 0; fi
  done
  return 1
}

kafka-cluster_start() {
  local n id dir; dir=$(kcluster_dir)
  mkdir -p "$dir"
  # No node running: a fresh cluster (new id, empty logs), as the single node starts.
  local any=0; for n in $KCLUSTER_NODES; do kcluster_node_alive "$n" && any=1; done
  if [ $any = 0 ] || [ ! -s "$dir/cluster.id" ]; then
    id=-
    while [ "${id:0:1}" = - ]; do id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '='); done
    echo "$id" >"$dir/cluster.id"
    for n in $KCLUSTER_NODES; do
      mkdir -p "$dir/node$n"
      [ -s "$(kcluster_log "$n")" ] && mv -f "$(kcluster_log "$n")" "$(kcluster_log "$n").prev"
      kcluster_format "$n" "$id" || return 1
    done
  fi
  for n in $KCLUSTER_NODES; do kafka-cluster_node_start "$n" || return 1; done
}
kafka-cluster_died() { # a node that exited during start-up, with the end of its log
  local n; for n in $KCLUSTER_NODES; do
    kcluster_node_alive "$n" && continue
    say "kafka-cluster: node $n exited; the end of $(kcluster_log "$n"):"; tail -n 20 "$(kcluster_log "$n")" >&2
    return 0
  done
  return 1
}
kafka-cluster_stop() {
  local n; for n in $KCLUSTER_NODES; do kafka-cluster_node_stop "$n" & done; wait
  for n in $KCLUSTER_NODES; do rm -f "$(kcluster_pidfile "$n")"; done
}
kafka-cluster_running() { # any node running (for down and status)
  local n; for n in $KCLUSTER_NODES; do kcluster_node_alive "$n" && return 0; done; return 1
}
kafka-cluster_logs() { local n; for n in $KCLUSTER_NODES; do echo "$(kcluster_log "$n")"; done; }
