# rabbitmq-cluster: three RabbitMQ nodes clustered on loopback (issue 35), for the
# cluster tests and the fault suite's node failures. Sourced by scripts/brokers.sh.
#
# Debian's rabbitmq-server, run as the plain broker is (rabbit_env: as the rabbitmq user
# when root, not through systemd), once per node: node N is bqcN@localhost, AMQP on
# 127.0.0.1:$((RMQC_AMQP_BASE+N)), Erlang distribution on $((RMQC_DIST_BASE+N)), no
# management plugin, its data under $STATE/rabbitmq-cluster/nodeN. The nodes share one
# Erlang cookie ($STATE/rabbitmq-cluster/home/.erlang.cookie, HOME of the nodes and of
# the CLI tools run against them) and the epmd of the machine (127.0.0.1:4369). Nodes 2
# and 3 join node 1 (rabbitmqctl join_cluster); the user $RMQC_USER (password
# $RMQC_PASS) is allowed everything on "/". Quorum queues are replicated on all three.
#
#   scripts/brokers.sh up rabbitmq-cluster          start the missing nodes, form the cluster
#   scripts/brokers.sh env rabbitmq-cluster         export BQ_AMQP_CLUSTER_URL=amqp://…,…,…/
#   scripts/brokers.sh node rabbitmq-cluster kill N kill -9 node N (start, stop: graceful)
#   scripts/brokers.sh node rabbitmq-cluster leader QUEUE   the node number leading a quorum queue
#   scripts/brokers.sh node rabbitmq-cluster safe N         node N can stop without a queue losing its quorum
#   scripts/brokers.sh node rabbitmq-cluster pid N          the pid of node N's Erlang VM
#   scripts/brokers.sh down rabbitmq-cluster

RMQC_NODES=3
RMQC_AMQP_BASE=${BQ_RMQC_AMQP_BASE:-5690} # node N: 5690+N (5691, 5692, 5693)
RMQC_DIST_BASE=${BQ_RMQC_DIST_BASE:-25690} # node N: 25690+N; the CLI tools take 35690+N..
# A second cluster beside this one (the fault suite kills the nodes of its own) takes
# other ports, node names and a state directory: BQ_RMQC_AMQP_BASE, BQ_RMQC_DIST_BASE,
# BQ_RMQC_PREFIX (node N is <prefix>N@localhost; epmd is the machine's) and BQ_STATE_DIR.
RMQC_PREFIX=${BQ_RMQC_PREFIX:-bqc}
RMQC_USER=babelqueue
RMQC_PASS=cluster-secret

rmqc_dir() { echo "$STATE/rabbitmq-cluster${1:+/node$1}"; }
rmqc_home() { echo "$STATE/rabbitmq-cluster/home"; }
rmqc_name() { echo "$RMQC_PREFIX$1@localhost"; }
rmqc_port() { echo $((RMQC_AMQP_BASE + $1)); }
rmqc_pidfile() { echo "$(rmqc_dir "$1").pid"; }
rmqc_log() { echo "$(rmqc_dir "$1")/node.log"; }

# rmqc_env N — the environment node N and the CLI tools run against it share (RMQC_ENV).
rmqc_env() {
  local d; d=$(rmqc_dir "$1")
  RMQC_ENV=(
    "PATH=$PATH" "HOME=$(rmqc_home)"
    "RABBITMQ_NODENAME=$(rmqc_name "$1")"
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    "RABBITMQ_NODE_PORT=$(rmqc_port "$1")"
    "RABBITMQ_DIST_PORT=$((RMQC_DIST_BASE + $1))"
    ERL_EPMD_ADDRESS=127.0.0.1
    "RABBITMQ_MNESIA_BASE=$d/mnesia"
    "RABBITMQ_LOG_BASE=$d/log"
    RABBITMQ_LOGS=-
    "RABBITMQ_PID_FILE=$d/rabbitmq.pid"
    "RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins"
    "RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf"
    "RABBITMQ_ADVANCED_CONFIG_FILE=$d/advanced.config"
    "RABBITMQ_CONF_ENV_FILE=$d/rabbitmq-env.conf"
    "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"
  )
}

# rmqc_as_rabbit N cmd… — run cmd as the rabbitmq user (when root) in node N's environment.
rmqc_as_rabbit() {
  local n=$1; shift
  rmqc_env "$n"
  (cd /tmp && as_user rabbitmq env -i "${RMQC_ENV[@]}" "$@")
}

# rmqc_ctl N args… — rabbitmqctl against node N (60 s at most).
rmqc_ctl() {
  local n=$1; shift
  rmqc_as_rabbit "$n" timeout 60 /usr/lib/rabbitmq/bin/rabbitmqctl -q -n "$(rmqc_name "$n")" "$@"
}

# rmqc_quiet N args… — rabbitmqctl against node N, its output shown only when it fails.
rmqc_quiet() {
  local out
  out=$(rmqc_ctl "$@" 2>&1) && return 0
  say "rabbitmq-cluster: rabbitmqctl -n $(rmqc_name "$1") ${*:2} failed:"; say "$out"
  return 1
}

# AMQP 0-9-1 header answered by a Connection.Start frame, as rabbitmq_probe.
rmqc_node_probe() { [ "$(tcp_exchange "$(rmqc_port "$1")" 414d515000000901 3)" = 010000 ]; }

rmqc_pid_alive() { # the pid in node N's pid file runs and is a RabbitMQ node
  local f pid; f=$(rmqc_pidfile "$1")
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null && grep -qa rabbitmq "/proc/$pid/cmdline" 2>/dev/null
}

# rmqc_beam_pid N — the pid of node N's Erlang VM (RABBITMQ_PID_FILE), empty when none runs.
rmqc_beam_pid() {
  local f pid; f="$(rmqc_dir "$1")/rabbitmq.pid"
  [ -s "$f" ] || return 0
  pid=$(tr -dc 0-9 <"$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -qa beam "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}

rmqc_prepare_dirs() {
  local n d home; home=$(rmqc_home)
  mkdir -p "$home"
  if [ ! -s "$home/.erlang.cookie" ]; then
    # one cookie for the three nodes and the CLI tools
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F >"$home/.erlang.cookie"
  fi
  chmod 400 "$home/.erlang.cookie"
  for n in $(seq 1 $RMQC_NODES); do
    d=$(rmqc_dir "$n")
    mkdir -p "$d/mnesia" "$d/log"
    [ -f "$d/enabled_plugins" ] || echo '[].' >"$d/enabled_plugins"
    [ -f "$d/rabbitmq-env.conf" ] || : >"$d/rabbitmq-env.conf"
    [ -f "$d/advanced.config" ] || echo '[].' >"$d/advanced.config"
    cat >"$d/rabbitmq.conf" <<EOF
# scripts/brokers/rabbitmq-cluster.sh: node $n of 3
loopback_users = none
EOF
  done
  chmod 755 "$(rmqc_dir)"
  is_root && chown -R rabbitmq:rabbitmq "$(rmqc_dir)"
  return 0
}

# rabbitmq-cluster_node_start N — start node N (if it is not running) and wait until it
# answers AMQP. A node that was in the cluster rejoins it by itself.
rabbitmq-cluster_node_start() {
  local n=$1 i
  rmqc_node_probe "$n" && return 0
  if ! rmqc_pid_alive "$n"; then
    rmqc_prepare_dirs
    rmqc_env "$n"
    local cmd=(env -i "${RMQC_ENV[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server)
    is_root && cmd=(runuser -u rabbitmq -- "${cmd[@]}")
    ( cd "$(rmqc_dir "$n")" && exec setsid nohup "${cmd[@]}" </dev/null >>"$(rmqc_log "$n")" 2>&1 8>&- ) &
    echo $! >"$(rmqc_pidfile "$n")"
  fi
  for i in $(seq 1 $((TIMEOUT * 2))); do
    rmqc_node_probe "$n" && return 0
    if ! rmqc_pid_alive "$n"; then
      say "rabbitmq-cluster: node $n exited during start-up; last lines of $(rmqc_log "$n"):"
      tail -n 30 "$(rmqc_log "$n")" >&2
      return 1
    fi
    sleep 0.5
  done
  say "rabbitmq-cluster: node $n did not answer within ${TIMEOUT}s"
  return 1
}

# rabbitmq-cluster_node_pid N — the pid of node N's Erlang VM (a fault test kills it itself,
# at the very instant it wants).
rabbitmq-cluster_node_pid() { local p; p=$(rmqc_beam_pid "$1"); [ -n "$p" ] && echo "$p"; }

# rabbitmq-cluster_node_kill N — SIGKILL node N's Erlang VM (and its start script).
rabbitmq-cluster_node_kill() {
  local n=$1 beam i
  beam=$(rmqc_beam_pid "$n")
  [ -n "$beam" ] && kill -KILL "$beam" 2>/dev/null
  rmqc_pid_alive "$n" && kill -KILL "$(cat "$(rmqc_pidfile "$n")")" 2>/dev/null
  for i in $(seq 1 40); do
    { [ -z "$beam" ] || ! kill -0 "$beam" 2>/dev/null; } && ! rmqc_pid_alive "$n" && break
    sleep 0.25
  done
  rm -f "$(rmqc_pidfile "$n")"
  return 0
}

# rabbitmq-cluster_node_stop N — stop node N gracefully (rabbitmqctl shutdown), SIGKILL
# after 60 s.
rabbitmq-cluster_node_stop() {
  local n=$1
  if rmqc_pid_alive "$n" || [ -n "$(rmqc_beam_pid "$n")" ]; then
    rmqc_ctl "$n" shutdown >/dev/null 2>&1 || true
  fi
  rabbitmq-cluster_node_kill "$n"
}

# rabbitmq-cluster_leader QUEUE — the number of the node that leads quorum queue QUEUE
# (vhost "/"), asked of the first node that answers.
rabbitmq-cluster_leader() {
  local q=$1 n leader
  for n in $(seq 1 $RMQC_NODES); do
    rmqc_node_probe "$n" || continue
    leader=$(rmqc_ctl "$n" list_queues --no-table-headers name leader 2>/dev/null | awk -v q="$q" -F'\t' '$1 == q { print $2 }')
    case $leader in "$RMQC_PREFIX"[0-9]*@*) leader=${leader#"$RMQC_PREFIX"}; echo "${leader%%@*}"; return 0 ;; esac
  done
  say "rabbitmq-cluster: no node names a leader of $q"
  return 1
}

# rabbitmq-cluster_node_safe N — succeeds when node N can be stopped without a quorum
# queue losing its majority (rabbitmq-queues check_if_node_is_quorum_critical): what a
# rolling restart waits for before it stops the next node.
rabbitmq-cluster_node_safe() {
  rmqc_as_rabbit "$1" timeout 60 /usr/lib/rabbitmq/bin/rabbitmq-queues -q -n "$(rmqc_name "$1")" \
    check_if_node_is_quorum_critical >/dev/null 2>&1
}

# rmqc_running — the running nodes of node 1's cluster, one a line.
rmqc_running() {
  local n
  for n in $(seq 1 $RMQC_NODES); do
    rmqc_node_probe "$n" || continue
    rmqc_ctl "$n" eval 'rabbit_nodes:all_running().' 2>/dev/null | tr -d "[]' " | tr , '\n' | grep .
    return
  done
}

# Up: every node answers, all three are running in one cluster, and the user logs in.
rabbitmq-cluster_probe() {
  local n
  for n in $(seq 1 $RMQC_NODES); do rmqc_node_probe "$n" || return 1; done
  [ "$(rmqc_running | sort -u | grep -c "^$RMQC_PREFIX[0-9]*@localhost\$")" = "$RMQC_NODES" ] || return 1
  rmqc_ctl 1 authenticate_user "$RMQC_USER" "$RMQC_PASS" >/dev/null 2>&1
}

# rabbitmq-cluster_up — the whole of `up` for the cluster (brokers.sh calls it instead of
# its one-process steps): start the nodes that are not running, side by side (nodes
# stopped together wait for each other at boot), join nodes 2 and 3 to node 1 when they
# are not clustered yet, add the user. Idempotent.
rabbitmq-cluster_up() {
  local t0=$SECONDS n pids=() rc=0 running
  if rabbitmq-cluster_probe; then say "rabbitmq-cluster: already up"; return 0; fi
  rmqc_prepare_dirs
  for n in $(seq 1 $RMQC_NODES); do
    rmqc_node_probe "$n" && continue
    if ! rmqc_pid_alive "$n" && tcp_open "$(rmqc_port "$n")"; then
      say "rabbitmq-cluster: port 127.0.0.1:$(rmqc_port "$n") is taken by another process"; return 1
    fi
    say "rabbitmq-cluster: starting node $n ($(rmqc_name "$n"), 127.0.0.1:$(rmqc_port "$n"))"
    rabbitmq-cluster_node_start "$n" & pids+=($!)
  done
  for n in "${pids[@]}"; do wait "$n" || rc=1; done
  [ $rc = 0 ] || return 1
  running=$(rmqc_running)
  for n in $(seq 2 $RMQC_NODES); do
    grep -qx "$(rmqc_name "$n")" <<<"$running" && grep -qx "$(rmqc_name 1)" <<<"$running" && continue
    say "rabbitmq-cluster: node $n joins $(rmqc_name 1)"
    rmqc_quiet "$n" stop_app && rmqc_quiet "$n" reset &&
      rmqc_quiet "$n" join_cluster "$(rmqc_name 1)" && rmqc_quiet "$n" start_app || return 1
  done
  if ! rmqc_ctl 1 authenticate_user "$RMQC_USER" "$RMQC_PASS" >/dev/null 2>&1; then
    rmqc_ctl 1 add_user "$RMQC_USER" "$RMQC_PASS" >/dev/null 2>&1 ||
      rmqc_quiet 1 change_password "$RMQC_USER" "$RMQC_PASS" || return 1
    rmqc_quiet 1 set_permissions -p / "$RMQC_USER" '.*' '.*' '.*' || return 1
  fi
  local i
  for i in $(seq 1 "$TIMEOUT"); do
    if rabbitmq-cluster_probe; then
      say "rabbitmq-cluster: up, nodes $(rmqc_running | tr '\n' ' ')($((SECONDS - t0))s)"
      return 0
    fi
    sleep 1
  done
  say "rabbitmq-cluster: not formed after ${TIMEOUT}s"
  return 1
}

rabbitmq-cluster_running() { # any node of the cluster runs
  local n
  for n in $(seq 1 $RMQC_NODES); do rmqc_pid_alive "$n" && return 0; done
  return 1
}

# Stop: node 3, 2, then 1 (the last one stopped is the first to start: they boot together).
rabbitmq-cluster_stop() {
  local n
  for n in $(seq $RMQC_NODES -1 1); do rabbitmq-cluster_node_stop "$n"; done
}
rabbitmq-cluster_start() { rabbitmq-cluster_up; }
rabbitmq-cluster_ports() {
  local n; for n in $(seq 1 $RMQC_NODES); do printf '%s ' "$(rmqc_port "$n")"; done; echo
}
rabbitmq-cluster_url() {
  local n hosts=()
  for n in $(seq 1 $RMQC_NODES); do hosts+=("127.0.0.1:$(rmqc_port "$n")"); done
  echo "BQ_AMQP_CLUSTER_URL=amqp://$RMQC_USER:$RMQC_PASS@$(IFS=,; echo "${hosts[*]}")/"
}
