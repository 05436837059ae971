# SQS: ElasticMQ (an SQS-compatible server, in-memory) from Maven Central. Sourced by scripts/brokers.sh.

sqs_home() { echo "$CACHE/elasticmq-$ELASTICMQ_VERSION"; }

# A real SQS call (query protocol): ListQueues must answer 200 with a ListQueuesResponse.
sqs_probe() {
  curl -fsS -m 3 -H 'Content-Type: application/x-www-form-urlencoded' \
    --data 'Action=ListQueues&Version=2012-11-05' "http://127.0.0.1:$SQS_PORT/" 2>/dev/null \
    | grep -q ListQueuesResponse
}
sqs_died() { ! pid_running sqs; }
sqs_ports() { echo "$SQS_PORT"; }
sqs_url() { echo "BQ_SQS_URL=sqs://us-east-1?endpoint=http://127.0.0.1:$SQS_PORT"; }

sqs_prepare() {
  local home; home=$(sqs_home)
  [ -f "$home/.complete" ] && return 0
  say "sqs: resolving org.elasticmq:elasticmq-server_2.13:$ELASTICMQ_VERSION from Maven Central"
  rm -rf "$home/libs"; mkdir -p "$home/libs"
  mvn_fetch "$ASSETS/elasticmq-pom.xml" "$home/libs" -Delasticmq.version="$ELASTICMQ_VERSION" >>"$(logfile sqs)" 2>&1 || return 1
  touch "$home/.complete"
}

sqs_start() {
  local dir="$STATE/sqs"
  mkdir -p "$dir"
  start_bg sqs "$dir" "$(java_bin)" -Xms64m -Xmx${BQ_SQS_HEAP:-256m} -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dconfig.file="$ASSETS/elasticmq.conf" -cp "$(sqs_home)/libs/*" org.elasticmq.server.Main
}

sqs_stop() { stop_pid sqs; }
