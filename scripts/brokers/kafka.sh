# Apache Kafka, single node, KRaft (combined broker + controller). Sourced by scripts/brokers.sh.
# The class path comes from Maven Central (org.apache.kafka:kafka_2.13 and its dependencies).

kafka_home() { echo "$CACHE/kafka-$KAFKA_VERSION"; }

# Metadata v4 request (all topics); the answer must list at least one broker.
#   size=17 | api_key=3 | version=4 | correlation=0xbb01 | client_id="bq" | topics=null | auto_create=false
kafka_probe() {
  local r; r=$(tcp_exchange $KAFKA_PORT 00000011000300040000bb0100026271ffffffff00 16 2>/dev/null) || return 1
  [ "${r:8:8}" = 0000bb01 ] && [ "${r:24:8}" != 00000000 ] && [ ${#r} -eq 32 ]
}
kafka_died() { ! pid_running kafka; }
kafka_ports() { echo "$KAFKA_PORT $KAFKA_CONTROLLER_PORT"; }
kafka_url() { echo "BQ_KAFKA_URL=kafka://127.0.0.1:$KAFKA_PORT"; }

kafka_prepare() {
  local home; home=$(kafka_home)
  [ -f "$home/.complete" ] && return 0
  say "kafka: resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION from Maven Central"
  rm -rf "$home/libs"; mkdir -p "$home/libs"
  mvn_fetch "$ASSETS/kafka-pom.xml" "$home/libs" -Dkafka.version="$KAFKA_VERSION" >>"$(logfile kafka)" 2>&1 || return 1
  touch "$home/.complete"
}

kafka_start() {
  local home dir java
  home=$(kafka_home); dir="$STATE/kafka"; java=$(java_bin)
  # A fresh data directory on every start: the tests keep nothing across broker restarts,
  # and a node started on the logs of earlier runs first loads every one of them (seen
  # here: 3,187 topic logs, 7.2 GB, still loading when the 120 s start timeout hit).
  rm -rf "$dir/data"
  mkdir -p "$dir/data"
  sed -e "s|@PORT@|$KAFKA_PORT|g" -e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
      -e "s|@LOG_DIRS@|$dir/data|g" -e "s|@AUTO_CREATE@|${BQ_KAFKA_AUTO_CREATE_TOPICS:-true}|g" \
      "$ASSETS/kafka-server.properties" >"$dir/server.properties" || return 1
  local jvm=(-Xms128m -Xmx${BQ_KAFKA_HEAP:-384m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20
             -XX:MaxDirectMemorySize=128m -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
             -Dlog4j2.configurationFile="$ASSETS/log4j2.properties" -Dkafka.logs.dir="$dir"
             -cp "$home/libs/*")
  # A cluster id is 16 random bytes in URL-safe base64, as Kafka's Uuid.randomUuid makes
  # it; like Kafka, draw again when it starts with '-' (one draw in 64), which the storage
  # tool's argument parser would read as an option ("--cluster-id: expected one argument").
  local id=-
  while [ "${id:0:1}" = - ]; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
  done
  "$java" "${jvm[@]}" kafka.tools.StorageTool format --cluster-id="$id" -c "$dir/server.properties" \
    >>"$(logfile kafka)" 2>&1 || return 1
  start_bg kafka "$dir" "$java" "${jvm[@]}" kafka.Kafka "$dir/server.properties"
}

kafka_stop() { stop_pid kafka; }
