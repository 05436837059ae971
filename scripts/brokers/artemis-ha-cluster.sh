# artemis-ha: two ActiveMQ Artemis brokers (the plain broker's distribution and version)
# as a primary/backup pair with replication, on loopback ports of their own:
#
#   node 1  primary   AMQP 127.0.0.1:5681  core 127.0.0.1:61681  $STATE/artemis-ha/node1
#   node 2  backup    AMQP 127.0.0.1:5682  core 127.0.0.1:61682  $STATE/artemis-ha/node2
#
# Each node is an instance of its own (`artemis create --clustered --replicated`), with a
# static cluster connection to the other over core, and -Xmx384m. The primary replicates
# its journal to the backup; the backup stays passive (its acceptors closed) until the
# primary is gone, then activates on the replicated journal. HA policy:
#
#   primary  <replication><primary>
#              <check-for-active-server>true      a restarted primary asks the cluster for an
#                                                  active server of its node ID (the backup
#                                                  that took over) and fails back to it
#              <vote-on-replication-failure>false the primary stays active when it loses its
#                                                  backup (stopping the backup must not stop it)
#   backup   <replication><backup>
#              <allow-failback>true               the backup steps down for the restarted primary
#              <restart-backup>true               and becomes its backup again
#
# Split brain: a single pair has nobody to vote. The backup activates as soon as it loses
# its replication connection (with no other active server to ask, its quorum vote passes),
# which is what a kill -9 of the primary needs; but a network partition between two
# machines would leave both active. On loopback the connection is only lost when the
# primary process is; in production use the pluggable lock manager (ZooKeeper) or three
# pairs (docs/transports/artemis.md, "Clusters").
#
# The URL lists both nodes: BQ_ARTEMIS_CLUSTER_URL=artemis://artemis:artemis@127.0.0.1:5681,127.0.0.1:5682
# Node control for the fault suite: artemis-ha_node_kill|start|stop N, and
# artemis-ha_leader (the node that is active). Sourced by scripts/brokers.sh, with the
# other clusters' files (*-cluster.sh).

ARTEMIS_HA_NODES="1 2"
# Ports, node 1's then node 2's; the fault suite starts a private pair on ports of its own
# (with a BQ_STATE_DIR of its own).
ARTEMIS_HA_AMQP_PORTS=${BQ_ARTEMIS_HA_AMQP_PORTS:-5681 5682}
ARTEMIS_HA_CORE_PORTS=${BQ_ARTEMIS_HA_CORE_PORTS:-61681 61682}
artemis-ha_amqp_port() { local p=($ARTEMIS_HA_AMQP_PORTS); echo "${p[$1 - 1]}"; }
artemis-ha_core_port() { local p=($ARTEMIS_HA_CORE_PORTS); echo "${p[$1 - 1]}"; }
artemis-ha_dir() { echo "$STATE/artemis-ha/node$1"; }
artemis-ha_node_name() { echo "artemis-ha-node$1"; } # its pid and log file names
ARTEMIS_HA_HEAP=${BQ_ARTEMIS_HA_HEAP:-384M}

artemis-ha_ports() { local n; for n in $ARTEMIS_HA_NODES; do echo -n "$(artemis-ha_amqp_port "$n") $(artemis-ha_core_port "$n") "; done; echo; }
artemis-ha_url() {
  local n hosts=""
  for n in $ARTEMIS_HA_NODES; do hosts="$hosts${hosts:+,}127.0.0.1:$(artemis-ha_amqp_port "$n")"; done
  echo "BQ_ARTEMIS_CLUSTER_URL=artemis://artemis:artemis@$hosts"
}

# artemis-ha_node_running N -> 0 when node N's process (started here) runs
artemis-ha_node_running() { pid_alive "$(artemis-ha_node_name "$1")"; }

# artemis-ha_node_active N -> 0 when node N's AMQP port takes connections (an active
# broker; a passive backup keeps its acceptors closed). A bare connect: an AMQP header
# exchange every second would fill the broker's log with connection resets.
artemis-ha_node_active() { tcp_open "$(artemis-ha_amqp_port "$1")"; }

# artemis-ha_node_state N -> what node N's log says it is now: active, replicating (a
# backup in sync with the active node), syncing (a backup still copying the journal) or
# down. The last of the broker's own lines decides:
#   AMQ221007 Server is now active        AMQ221024 backup synchronized with its primary
#   AMQ221109 backup started, waiting      AMQ221002 server stopped (failback, shutdown)
artemis-ha_node_state() {
  local n=$1 log last
  artemis-ha_node_running "$n" || { echo down; return; }
  log=$(logfile "$(artemis-ha_node_name "$n")")
  last=$(grep -oE 'AMQ22(1007|1024|1109|1002)' "$log" 2>/dev/null | tail -1)
  case $last in
    AMQ221007) if artemis-ha_node_active "$n"; then echo active; else echo starting; fi ;;
    AMQ221024) echo replicating ;;
    *) echo syncing ;;
  esac
}

# artemis-ha_active -> the number of the node that is active now (nothing when none is);
# `scripts/brokers.sh node artemis-ha leader` prints it.
artemis-ha_active() {
  local n
  for n in $ARTEMIS_HA_NODES; do
    [ "$(artemis-ha_node_state "$n")" = active ] && { echo "$n"; return 0; }
  done
  return 1
}

artemis-ha_leader() { artemis-ha_active; }

# The pair is healthy when one node is active and the other replicates it.
artemis-ha_probe() {
  local n s active=0 replicating=0
  for n in $ARTEMIS_HA_NODES; do
    s=$(artemis-ha_node_state "$n")
    [ "$s" = active ] && active=$((active + 1))
    [ "$s" = replicating ] && replicating=$((replicating + 1))
  done
  [ $active = 1 ] && [ $replicating = 1 ]
}

artemis-ha_prepare() {
  local n
  # the plain broker's distribution, in the cache (one prepare of it at a time)
  ( flock 7; artemis_fetch artemis-ha ) 7>"$CACHE/.prepare-artemis.lock" || return 1
  for n in $ARTEMIS_HA_NODES; do artemis-ha_create "$n" || return 1; done
}

# artemis-ha_create N — node N's instance (once), pointed at the distribution in the cache.
artemis-ha_create() {
  local n=$1 home inst xml other role
  home=$(artemis_home); inst=$(artemis-ha_dir "$n"); xml=$inst/etc/broker.xml
  if [ -f "$xml" ]; then
    sed -i "s#^ARTEMIS_HOME=.*#ARTEMIS_HOME='$home'#" "$inst/etc/artemis.profile" "$inst/etc/artemis-utility.profile"
    return 0
  fi
  other=1; [ "$n" = 1 ] && other=2
  role=(); [ "$n" = 1 ] || role=(--backup)
  say "artemis-ha: creating node $n in $inst"
  mkdir -p "$STATE/artemis-ha"
  JAVA_HOME=${BQ_ARTEMIS_JAVA_HOME:-${JAVA_HOME:-}} "$home/bin/artemis" create "$inst" --silent --force \
    --user artemis --password artemis --role amq --allow-anonymous \
    --host 127.0.0.1 --name "babelqueue-ha$n" --default-port "$(artemis-ha_core_port "$n")" \
    --clustered --replicated "${role[@]}" --cluster-user bqcluster --cluster-password bqcluster \
    --staticCluster "tcp://127.0.0.1:$(artemis-ha_core_port "$other")" \
    --no-web --no-hornetq-acceptor --no-mqtt-acceptor --no-stomp-acceptor \
    --nio --no-autotune --no-fsync --java-memory "$ARTEMIS_HA_HEAP" \
    >>"$(logfile "$(artemis-ha_node_name "$n")")" 2>&1 || return 1
  # The AMQP acceptor on the node's port; anycast queues for auto-created addresses, as
  # on the plain broker.
  sed -i "s#tcp://127.0.0.1:5672?#tcp://127.0.0.1:$(artemis-ha_amqp_port "$n")?#" "$xml"
  sed -i 's#<address-setting match="\#">#<address-setting match="\#">\n            <default-address-routing-type>ANYCAST</default-address-routing-type>\n            <default-queue-routing-type>ANYCAST</default-queue-routing-type>#' "$xml"
  # The HA policy (see the head of this file).
  if [ "$n" = 1 ]; then
    POLICY='<primary>
               <check-for-active-server>true</check-for-active-server>
               <vote-on-replication-failure>false</vote-on-replication-failure>
            </primary>'
  else
    POLICY='<backup>
               <allow-failback>true</allow-failback>
               <restart-backup>true</restart-backup>
            </backup>'
  fi
  POLICY=$POLICY perl -0pi -e 's#<replication>\s*<(primary|backup)(/>|>.*?</\1>)#<replication>\n            $ENV{POLICY}#s' "$xml" || return 1
  sed -i 's/-Xms[0-9]*[MmGg]/-Xms64M/' "$inst/etc/artemis.profile"
  grep -q "tcp://127.0.0.1:$(artemis-ha_amqp_port "$n")?" "$xml" && grep -q '<allow-failback>\|<check-for-active-server>' "$xml" \
    || { say "artemis-ha: could not configure node $n ($xml)"; return 1; }
}

# artemis-ha_node_start N — start node N unless it runs.
artemis-ha_node_start() {
  local n=$1 name inst javahome
  name=$(artemis-ha_node_name "$n"); inst=$(artemis-ha_dir "$n")
  artemis-ha_node_running "$n" && return 0
  [ -f "$inst/etc/broker.xml" ] || artemis-ha_prepare || return 1
  [ -s "$(logfile "$name")" ] && mv -f "$(logfile "$name")" "$(logfile "$name").prev"
  javahome=${BQ_ARTEMIS_JAVA_HOME:-${JAVA_HOME:-}}
  if [ -z "$javahome" ] && [ -n "${BQ_JAVA:-}" ]; then javahome=$(dirname "$(dirname "$BQ_JAVA")"); fi
  if [ -n "$javahome" ]; then
    start_bg "$name" "$inst" env JAVA_HOME="$javahome" "$inst/bin/artemis" run
  else
    start_bg "$name" "$inst" "$inst/bin/artemis" run
  fi
  artemis-ha_pidfile
}

# artemis-ha_node_stop N — a graceful stop (SIGTERM; KILL after 30 s).
artemis-ha_node_stop() { stop_pid "$(artemis-ha_node_name "$1")"; artemis-ha_pidfile; }

# artemis-ha_pidfile — the cluster's own pid file (what `status` shows) names a node that
# runs, or is gone when none does.
artemis-ha_pidfile() {
  local n
  for n in $ARTEMIS_HA_NODES; do
    if artemis-ha_node_running "$n"; then cat "$(pidfile "$(artemis-ha_node_name "$n")")" >"$(pidfile artemis-ha)"; return 0; fi
  done
  rm -f "$(pidfile artemis-ha)"
}

# artemis-ha_node_kill N — kill -9, the pid file left to say it was ours.
artemis-ha_node_kill() {
  local f; f=$(pidfile "$(artemis-ha_node_name "$1")")
  [ -s "$f" ] || return 0
  kill -KILL "$(cat "$f")" 2>/dev/null
  local i; for i in $(seq 1 50); do kill -0 "$(cat "$f")" 2>/dev/null || break; sleep 0.1; done
  rm -f "$f"
  artemis-ha_pidfile
}

# The cluster's own up and stop (brokers.sh's up and down call NAME_up and NAME_stop):
# start the nodes not running, the primary first when neither runs, and wait until one
# is active and the other replicates it; a node that exits meanwhile (a backup stepping
# down for a failback has been seen to exit rather than restart, now and then) is
# started again, twice at most. Down stops both, the backup first.
artemis-ha_up() {
  local n t0=$SECONDS
  local -A starts=()
  if artemis-ha_probe; then say "artemis-ha: already up (node $(artemis-ha_active) active)"; return 0; fi
  artemis-ha_prepare || { say "artemis-ha: preparing failed"; return 1; }
  while ! artemis-ha_probe; do
    for n in $ARTEMIS_HA_NODES; do
      artemis-ha_node_running "$n" && continue
      if [ "${starts[$n]:-0}" -ge 3 ]; then
        say "artemis-ha: node $n exited after three starts"; tail_log "$(artemis-ha_node_name "$n")"; return 1
      fi
      local p
      for p in $(artemis-ha_amqp_port "$n") $(artemis-ha_core_port "$n"); do
        if tcp_open "$p"; then say "artemis-ha: port 127.0.0.1:$p (node $n) is taken by another process"; return 1; fi
      done
      say "artemis-ha: starting node $n"
      starts[$n]=$((${starts[$n]:-0} + 1))
      artemis-ha_node_start "$n" || return 1
      # the primary first: a backup started alone waits for a primary to replicate
      if [ "$n" = 1 ] && ! artemis-ha_node_running 2; then artemis-ha_wait_node 1 active || return 1; fi
    done
    if (( SECONDS - t0 >= TIMEOUT )); then
      say "artemis-ha: not formed after ${TIMEOUT}s (node 1 $(artemis-ha_node_state 1), node 2 $(artemis-ha_node_state 2))"
      for n in $ARTEMIS_HA_NODES; do tail_log "$(artemis-ha_node_name "$n")"; done
      return 1
    fi
    sleep 1
  done
  say "artemis-ha: up, node $(artemis-ha_active) active, the other replicating ($((SECONDS - t0))s)"
}

# artemis-ha_wait_node N STATE [SECONDS] — wait until node N is in STATE.
artemis-ha_wait_node() {
  local n=$1 want=$2 limit=${3:-$TIMEOUT} t0=$SECONDS
  until [ "$(artemis-ha_node_state "$n")" = "$want" ]; do
    if (( SECONDS - t0 >= limit )); then say "artemis-ha: node $n not $want after ${limit}s"; return 1; fi
    sleep 0.5
  done
}

# artemis-ha_running -> 0 when a node of the pair (started here) runs.
artemis-ha_running() {
  local n
  for n in $ARTEMIS_HA_NODES; do artemis-ha_node_running "$n" && return 0; done
  return 1
}

artemis-ha_stop() {
  local n
  for n in 2 1; do
    if artemis-ha_node_running "$n"; then say "artemis-ha: stopping node $n"; artemis-ha_node_stop "$n"; fi
  done
}
