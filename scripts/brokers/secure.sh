# The secure variants of the brokers: each a broker process of its own, beside the plain
# one (its own ports and data under $STATE/<name>), that refuses plaintext and the default
# credentials. Their certificates come from scripts/certs.sh ($STATE/tls). See
# docs/security.md. Sourced by scripts/brokers.sh.
#
# Credentials (test-only, loopback): every secret below is a fixed test value.

TLS_DIR() { echo "$STATE/tls"; }

# ensure_certs — make the test PKI when it is missing or about to expire. A secure broker
# still running on certificates made before is stopped, so `up` starts it on the new ones.
ensure_certs() {
  local before after n
  before=$(cat "$(TLS_DIR)/ca.crt" 2>/dev/null | cksum)
  bash "$HERE/certs.sh" "$(TLS_DIR)" >/dev/null || return 1
  after=$(cksum <"$(TLS_DIR)/ca.crt")
  [ "$before" = "$after" ] && return 0
  for n in $SECURE_NAMES; do
    if pid_alive "$n"; then say "$n: new test certificates; restarting it"; "${n}_stop"; fi
  done
}

# tls_query [client] — the URL query of the shared TLS grammar (docs/security.md): the CA,
# and with "client" the client certificate.
tls_query() {
  local d; d=$(TLS_DIR)
  local q="tls_ca=$d/ca.crt"
  [ "${1:-}" = client ] && q="$q&tls_cert=$d/client.crt&tls_key=$d/client.key"
  echo "$q"
}

# ---------------------------------------------------------------------------
# redis-tls: TLS only (no plaintext port), client certificates required, the default user
# off, one ACL user bq (all keys and commands) and bqro (read-only commands: no writes).

REDIS_TLS_PORT=6390
REDIS_TLS_USER=bq
REDIS_TLS_PASS=bq-redis-secret

redis-tls_probe() {
  local d; d=$(TLS_DIR)
  [ "$(timeout 3 redis-cli -h 127.0.0.1 -p $REDIS_TLS_PORT --tls --cacert "$d/ca.crt" \
      --cert "$d/client.crt" --key "$d/client.key" --user $REDIS_TLS_USER --pass $REDIS_TLS_PASS \
      --no-auth-warning ping 2>/dev/null)" = PONG ]
}
redis-tls_died() { ! pid_running redis-tls; }
redis-tls_start() {
  local dir=$STATE/redis-tls d; d=$(TLS_DIR)
  mkdir -p "$dir"
  : >>"$(logfile redis-tls)"
  cat >"$dir/redis.conf" <<EOF
# scripts/brokers/secure.sh
bind 127.0.0.1
protected-mode yes
port 0
tls-port $REDIS_TLS_PORT
tls-cert-file $d/server.crt
tls-key-file $d/server.key
tls-ca-cert-file $d/ca.crt
tls-auth-clients yes
daemonize yes
pidfile $(pidfile redis-tls)
logfile $(logfile redis-tls)
dir $dir
save ""
appendonly no
maxmemory 128mb
user default off
user $REDIS_TLS_USER on >$REDIS_TLS_PASS ~* &* +@all
user bqro on >bq-readonly-secret ~* &* +@read +@connection
EOF
  redis-server "$dir/redis.conf" 8>&- || return 1
  local i; for i in $(seq 1 20); do [ -s "$(pidfile redis-tls)" ] && break; sleep 0.1; done
}
redis-tls_stop() {
  local d; d=$(TLS_DIR)
  pid_alive redis-tls && timeout 10 redis-cli -h 127.0.0.1 -p $REDIS_TLS_PORT --tls --cacert "$d/ca.crt" \
    --cert "$d/client.crt" --key "$d/client.key" --user $REDIS_TLS_USER --pass $REDIS_TLS_PASS \
    --no-auth-warning shutdown nosave >/dev/null 2>&1
  stop_pid redis-tls
}
redis-tls_url() {
  echo "BQ_REDIS_TLS_URL='rediss://$REDIS_TLS_USER:$REDIS_TLS_PASS@127.0.0.1:$REDIS_TLS_PORT/0?$(tls_query client)'"
}
redis-tls_ports() { echo "$REDIS_TLS_PORT"; }

# ---------------------------------------------------------------------------
# rabbitmq-tls: a second RabbitMQ node (rabbit-tls@localhost) with no plaintext listener,
# a TLS listener that verifies the peer (client certificates required), no guest; users
# from a definitions file loaded at boot: bq (every permission on the vhost bqsecure, and
# no other vhost), bqlimited (on bqsecure, only queues named bqlim-<hex>: no dead-letter
# queue), bqadmin (administrator, both vhosts).

AMQP_TLS_PORT=5671
RABBIT_TLS_DIST_PORT=25673
RABBIT_TLS_VHOST=bqsecure
RABBIT_TLS_USER=bq
RABBIT_TLS_PASS=bq-rabbit-secret
RABBIT_TLS_LIMITED_PASS=bq-limited-secret

rabbit_tls_env() {
  local home=/var/lib/rabbitmq dir=$STATE/rabbitmq-tls
  is_root || home=$dir
  RABBIT_ENV=(
    "PATH=$PATH" "HOME=$home"
    RABBITMQ_NODENAME=rabbit-tls@localhost
    "RABBITMQ_DIST_PORT=$RABBIT_TLS_DIST_PORT"
    ERL_EPMD_ADDRESS=127.0.0.1
    "RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf"
    "RABBITMQ_MNESIA_BASE=$dir/mnesia"
    "RABBITMQ_LOG_BASE=$dir/log"
    RABBITMQ_LOGS=-
    "RABBITMQ_PID_FILE=$dir/rabbitmq.pid"
    "RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins"
    "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"
  )
}

# hexbytes HEX — the bytes of a hex string.
hexbytes() { printf "$(printf %s "$1" | sed 's/\(..\)/\\x\1/g')"; }

# rabbit_hash PASSWORD — RabbitMQ's rabbit_password_hashing_sha256:
# base64(salt ++ sha256(salt ++ password)), a 4-byte random salt.
rabbit_hash() {
  local salt; salt=$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')
  { hexbytes "$salt"; { hexbytes "$salt"; printf '%s' "$1"; } | openssl dgst -sha256 -binary; } | base64 -w0
}

# AMQP 0-9-1 over TLS with the client certificate: the protocol header must get a
# Connection.Start frame back.
rabbitmq-tls_probe() {
  local d r; d=$(TLS_DIR)
  r=$( (printf 'AMQP\000\000\011\001'; sleep 2) | timeout 4 openssl s_client -quiet -verify_return_error -connect 127.0.0.1:$AMQP_TLS_PORT \
        -CAfile "$d/ca.crt" -cert "$d/client.crt" -key "$d/client.key" 2>/dev/null | head -c 3 | od -An -tx1 | tr -d ' \n')
  [ "$r" = 010000 ]
}
rabbitmq-tls_died() { ! pid_running rabbitmq-tls; }
rabbitmq-tls_start() {
  local dir=$STATE/rabbitmq-tls d; d=$(TLS_DIR)
  mkdir -p "$dir/mnesia" "$dir/log"
  [ -f "$dir/enabled_plugins" ] || echo '[].' >"$dir/enabled_plugins"
  printf '%s\n' "# scripts/brokers/secure.sh" \
    "listeners.tcp = none" \
    "listeners.ssl.1 = 127.0.0.1:$AMQP_TLS_PORT" \
    "ssl_options.cacertfile = $d/ca.crt" \
    "ssl_options.certfile = $d/server.crt" \
    "ssl_options.keyfile = $d/server.key" \
    "ssl_options.verify = verify_peer" \
    "ssl_options.fail_if_no_peer_cert = true" \
    "default_user = bqadmin" \
    "default_pass = bq-admin-secret" \
    "default_vhost = $RABBIT_TLS_VHOST" \
    "load_definitions = $dir/definitions.json" \
    "vm_memory_high_watermark.absolute = 256MiB" >"$dir/rabbitmq.conf"
  local all='"configure": ".*", "write": ".*", "read": ".*"' sha=rabbit_password_hashing_sha256
  printf '%s\n' '{' \
    '  "users": [' \
    "    {\"name\": \"bqadmin\", \"password_hash\": \"$(rabbit_hash bq-admin-secret)\", \"hashing_algorithm\": \"$sha\", \"tags\": [\"administrator\"]}," \
    "    {\"name\": \"$RABBIT_TLS_USER\", \"password_hash\": \"$(rabbit_hash $RABBIT_TLS_PASS)\", \"hashing_algorithm\": \"$sha\", \"tags\": []}," \
    "    {\"name\": \"bqlimited\", \"password_hash\": \"$(rabbit_hash $RABBIT_TLS_LIMITED_PASS)\", \"hashing_algorithm\": \"$sha\", \"tags\": []}" \
    '  ],' \
    "  \"vhosts\": [{\"name\": \"/\"}, {\"name\": \"$RABBIT_TLS_VHOST\"}]," \
    '  "permissions": [' \
    "    {\"user\": \"bqadmin\", \"vhost\": \"/\", $all}," \
    "    {\"user\": \"bqadmin\", \"vhost\": \"$RABBIT_TLS_VHOST\", $all}," \
    "    {\"user\": \"$RABBIT_TLS_USER\", \"vhost\": \"$RABBIT_TLS_VHOST\", $all}," \
    "    {\"user\": \"bqlimited\", \"vhost\": \"$RABBIT_TLS_VHOST\", \"configure\": \"^bqlim-[0-9a-f]+\$\", \"write\": \"^(amq\\\\.default|bqlim-[0-9a-f]+)\$\", \"read\": \"^bqlim-[0-9a-f]+\$\"}" \
    '  ]' \
    '}' >"$dir/definitions.json"
  is_root && chown -R rabbitmq:rabbitmq "$dir"
  rabbit_tls_env
  local cmd=(env -i "${RABBIT_ENV[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server)
  is_root && cmd=(runuser -u rabbitmq -- "${cmd[@]}")
  start_bg rabbitmq-tls "$dir" "${cmd[@]}"
}
rabbitmq-tls_stop() {
  if pid_alive rabbitmq-tls; then
    rabbit_tls_env
    (cd /tmp && as_user rabbitmq env -i "${RABBIT_ENV[@]}" timeout 60 /usr/lib/rabbitmq/bin/rabbitmqctl -q shutdown >/dev/null 2>&1) || true
  fi
  stop_pid rabbitmq-tls
}
rabbitmq-tls_url() {
  echo "BQ_AMQP_TLS_URL='amqps://$RABBIT_TLS_USER:$RABBIT_TLS_PASS@localhost:$AMQP_TLS_PORT/$RABBIT_TLS_VHOST?$(tls_query client)'"
}
rabbitmq-tls_ports() { echo "$AMQP_TLS_PORT $RABBIT_TLS_DIST_PORT"; }

# ---------------------------------------------------------------------------
# postgres-tls: a second PostgreSQL cluster on its own port and data directory that
# accepts only TLS connections (hostssl; hostnossl is rejected) with a password
# (scram-sha-256), for the idempotency and outbox stores; role bqsecure owns the
# database bqsecure.

PG_TLS_PORT=5442
PG_TLS_USER=bqsecure
PG_TLS_PASS=bq-postgres-secret

postgres-tls_probe() {
  local d; d=$(TLS_DIR)
  PGPASSWORD=$PG_TLS_PASS PGCONNECT_TIMEOUT=3 psql -qtAX \
    "host=127.0.0.1 port=$PG_TLS_PORT user=$PG_TLS_USER dbname=$PG_TLS_USER sslmode=verify-full sslrootcert=$d/ca.crt" \
    -c 'select 1' >/dev/null 2>&1
}
postgres-tls_died() { ! pid_running postgres-tls; }
postgres-tls_start() {
  local bin owner dir data sock d
  bin=$(pg_bin); owner=$(pg_owner); dir=$STATE/postgres-tls; data=$dir/data; sock=$dir/run; d=$(TLS_DIR)
  mkdir -p "$dir" "$sock"
  : >>"$(logfile postgres-tls)"
  if is_root; then chown "$owner" "$dir" "$sock" "$(logfile postgres-tls)"; fi
  if [ ! -s "$data/PG_VERSION" ]; then
    as_user "$owner" "$bin/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=reject \
      -E UTF8 --locale=C.UTF-8 >>"$(logfile postgres-tls)" 2>&1 \
      || as_user "$owner" "$bin/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=reject \
      -E UTF8 --no-locale >>"$(logfile postgres-tls)" 2>&1 || return 1
    printf '%s\n' "# babelqueue secure test database (scripts/brokers/secure.sh)" \
      "listen_addresses = '127.0.0.1'" "port = $PG_TLS_PORT" "unix_socket_directories = '$sock'" \
      "shared_buffers = 16MB" "max_connections = 50" "fsync = off" "synchronous_commit = off" \
      "full_page_writes = off" "ssl = on" "ssl_cert_file = 'server.crt'" "ssl_key_file = 'server.key'" \
      "password_encryption = 'scram-sha-256'" >>"$data/postgresql.conf"
    printf '%s\n' "# TYPE DATABASE USER ADDRESS METHOD" "local all all trust" \
      "hostnossl all all 127.0.0.1/32 reject" "hostssl all all 127.0.0.1/32 scram-sha-256" >"$data/pg_hba.conf"
  fi
  # PostgreSQL wants its key owned by the server's user, mode 0600: a copy of its own.
  install -m 0644 "$d/server.crt" "$data/server.crt" && install -m 0600 "$d/server.key" "$data/server.key" || return 1
  is_root && chown "$owner" "$data/server.crt" "$data/server.key"
  as_user "$owner" "$bin/pg_ctl" -D "$data" -l "$(logfile postgres-tls)" -w -t "$TIMEOUT" start >/dev/null 8>&- || return 1
  head -1 "$data/postmaster.pid" >"$(pidfile postgres-tls)"
  as_user "$owner" psql -qX -h "$sock" -p $PG_TLS_PORT -U postgres -d postgres -v ON_ERROR_STOP=1 >/dev/null <<SQL || return 1
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PG_TLS_USER') THEN
    CREATE ROLE $PG_TLS_USER LOGIN PASSWORD '$PG_TLS_PASS';
  END IF;
END \$\$;
SELECT 'CREATE DATABASE $PG_TLS_USER OWNER $PG_TLS_USER'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$PG_TLS_USER') \gexec
SQL
}
postgres-tls_stop() {
  if pid_alive postgres-tls; then
    as_user "$(pg_owner)" "$(pg_bin)/pg_ctl" -D "$STATE/postgres-tls/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  fi
  stop_pid postgres-tls
}
postgres-tls_url() {
  echo "BQ_POSTGRES_TLS_URL='postgres://$PG_TLS_USER:$PG_TLS_PASS@127.0.0.1:$PG_TLS_PORT/$PG_TLS_USER?sslmode=verify-full&sslrootcert=$(TLS_DIR)/ca.crt'"
}
postgres-tls_ports() { echo "$PG_TLS_PORT"; }

# ---------------------------------------------------------------------------
# kafka-tls: a second single-node KRaft Kafka whose only client listener is SASL_SSL
# (TLS, SCRAM-SHA-512 users made when the storage is formatted), with the standard
# authorizer on and nothing allowed without an ACL. Users: admin (super user; the broker
# talks to itself as admin), bq (every operation on topics, groups and transactional ids
# prefixed bqsec-, and on the transactional ids babelqueue-tx-… of redrives), bqlim (only
# topics and groups prefixed bqlim-). The controller listener is plaintext on loopback
# (its principal ANONYMOUS is a super user: it serves no client API).

KAFKA_TLS_PORT=9094
KAFKA_TLS_CONTROLLER_PORT=9095
KAFKA_TLS_USER=bq
KAFKA_TLS_PASS=bq-kafka-secret
KAFKA_TLS_LIMITED_PASS=bq-kafka-limited-secret
KAFKA_TLS_ADMIN_PASS=bq-kafka-admin-secret

kafka-tls_probe() {
  local d; d=$(TLS_DIR)
  timeout 4 openssl s_client -connect 127.0.0.1:$KAFKA_TLS_PORT -CAfile "$d/ca.crt" -verify_return_error \
    </dev/null >/dev/null 2>&1
}
kafka-tls_died() { ! pid_running kafka-tls; }
kafka-tls_ports() { echo "$KAFKA_TLS_PORT $KAFKA_TLS_CONTROLLER_PORT"; }
kafka-tls_url() {
  echo "BQ_KAFKA_TLS_URL='kafka://$KAFKA_TLS_USER:$KAFKA_TLS_PASS@127.0.0.1:$KAFKA_TLS_PORT?tls=1&sasl=scram-sha-512&$(tls_query)'"
}

kafka-tls_prepare() {
  kafka_prepare || return 1
  local tools; tools="$(kafka_home)/tools"
  [ -f "$tools/.complete" ] && return 0
  say "kafka-tls: resolving org.apache.kafka:kafka-tools:$KAFKA_VERSION (kafka-acls) from Maven Central"
  rm -rf "$tools"; mkdir -p "$tools"
  mvn_fetch "$ASSETS/kafka-tools-pom.xml" "$tools" -Dkafka.version="$KAFKA_VERSION" >>"$(logfile kafka-tls)" 2>&1 || return 1
  touch "$tools/.complete"
}

kafka-tls_start() {
  local home dir java d
  home=$(kafka_home); dir="$STATE/kafka-tls"; java=$(java_bin); d=$(TLS_DIR)
  rm -rf "$dir/data" "$dir/acls.done"   # fresh each start, as the plain one
  mkdir -p "$dir/data"
  sed -e "s|@PORT@|$KAFKA_TLS_PORT|g" -e "s|@CONTROLLER_PORT@|$KAFKA_TLS_CONTROLLER_PORT|g" \
      -e "s|@LOG_DIRS@|$dir/data|g" -e "s|@AUTO_CREATE@|true|g" \
      -e "s|^listeners=.*|listeners=SASL_SSL://127.0.0.1:$KAFKA_TLS_PORT,CONTROLLER://127.0.0.1:$KAFKA_TLS_CONTROLLER_PORT|" \
      -e "s|^advertised.listeners=.*|advertised.listeners=SASL_SSL://127.0.0.1:$KAFKA_TLS_PORT|" \
      -e "s|^inter.broker.listener.name=.*|inter.broker.listener.name=SASL_SSL|" \
      -e "s|^listener.security.protocol.map=.*|listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL|" \
      "$ASSETS/kafka-server.properties" >"$dir/server.properties" || return 1
  printf '%s\n' "" "# --- scripts/brokers/secure.sh: TLS, SCRAM, ACLs ---" \
    "sasl.enabled.mechanisms=SCRAM-SHA-512" \
    "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512" \
    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$KAFKA_TLS_ADMIN_PASS\";" \
    "ssl.keystore.type=PKCS12" "ssl.keystore.location=$d/server.p12" "ssl.keystore.password=babelqueue" \
    "ssl.truststore.type=PEM" "ssl.truststore.location=$d/ca.crt" "ssl.client.auth=none" \
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" \
    "super.users=User:admin;User:ANONYMOUS" \
    "allow.everyone.if.no.acl.found=false" >>"$dir/server.properties"
  printf '%s\n' "security.protocol=SASL_SSL" "sasl.mechanism=SCRAM-SHA-512" \
    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$KAFKA_TLS_ADMIN_PASS\";" \
    "ssl.truststore.type=PEM" "ssl.truststore.location=$d/ca.crt" >"$dir/admin.properties"
  local jvm=(-Xms64m -Xmx${BQ_KAFKA_TLS_HEAP:-320m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20
             -XX:MaxDirectMemorySize=96m -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
             -Dlog4j2.configurationFile="$ASSETS/log4j2.properties" -Dkafka.logs.dir="$dir"
             -cp "$home/libs/*")
  local id=-
  while [ "${id:0:1}" = - ]; do id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '='); done
  "$java" "${jvm[@]}" kafka.tools.StorageTool format --cluster-id="$id" -c "$dir/server.properties" \
    --add-scram "SCRAM-SHA-512=[name=admin,password=$KAFKA_TLS_ADMIN_PASS]" \
    --add-scram "SCRAM-SHA-512=[name=$KAFKA_TLS_USER,password=$KAFKA_TLS_PASS]" \
    --add-scram "SCRAM-SHA-512=[name=bqlim,password=$KAFKA_TLS_LIMITED_PASS]" \
    >>"$(logfile kafka-tls)" 2>&1 || return 1
  start_bg kafka-tls "$dir" "$java" "${jvm[@]}" kafka.Kafka "$dir/server.properties"
}

# The ACLs (kafka-acls as admin); the data directory is new on every start, so are they.
kafka-tls_setup() {
  local dir=$STATE/kafka-tls java tools
  java=$(java_bin); tools="$(kafka_home)/tools"
  [ -f "$dir/acls.done" ] && [ "$(cat "$dir/acls.done")" = "$(cat "$(pidfile kafka-tls)")" ] && return 0
  acl() {
    "$java" -Xmx128m -XX:TieredStopAtLevel=1 -cp "$tools/*" org.apache.kafka.tools.AclCommand \
      --bootstrap-server 127.0.0.1:$KAFKA_TLS_PORT --command-config "$dir/admin.properties" --add "$@" \
      >>"$(logfile kafka-tls)" 2>&1
  }
  acl --allow-principal "User:$KAFKA_TLS_USER" --operation All --resource-pattern-type prefixed \
      --topic bqsec- --group bqsec- --transactional-id babelqueue-tx-bqsec- || return 1
  acl --allow-principal User:bqlim --operation All --resource-pattern-type prefixed \
      --topic bqlim- --group bqlim- || return 1
  acl --allow-principal "User:$KAFKA_TLS_USER" --allow-principal User:bqlim --operation DescribeConfigs --cluster || return 1
  cat "$(pidfile kafka-tls)" >"$dir/acls.done"
}

kafka-tls_stop() { stop_pid kafka-tls; }

# ---------------------------------------------------------------------------
# artemis-tls: a second Artemis instance whose only acceptor is AMQP over TLS, logins
# required (no anonymous, no guest). Users: admin (role amq: everything), bq (role bqrole:
# send, consume, browse, create and delete queues and addresses), bqlim (role bqlim: the
# same, but nothing on addresses named <word>.dlq: no dead-letter queue).

ARTEMIS_TLS_PORT=5674
ARTEMIS_TLS_USER=bq
ARTEMIS_TLS_PASS=bq-artemis-secret
ARTEMIS_TLS_LIMITED_PASS=bq-artemis-limited-secret

artemis-tls_instance() { echo "$STATE/artemis-tls/instance"; }

# AMQP 1.0 SASL header over TLS: the broker must echo it, and its log say it is live.
artemis-tls_probe() {
  local d r; d=$(TLS_DIR)
  r=$( (printf 'AMQP\003\001\000\000'; sleep 2) | timeout 4 openssl s_client -quiet -verify_return_error -connect 127.0.0.1:$ARTEMIS_TLS_PORT \
        -CAfile "$d/ca.crt" 2>/dev/null | head -c 8 | od -An -tx1 | tr -d ' \n')
  [ "$r" = 414d515003010000 ] || return 1
  grep -q 'AMQ221007' "$(logfile artemis-tls)" 2>/dev/null || ! pid_running artemis-tls
}
artemis-tls_died() { ! pid_running artemis-tls; }
artemis-tls_ports() { echo "$ARTEMIS_TLS_PORT"; }
artemis-tls_url() {
  echo "BQ_ARTEMIS_TLS_URL='artemis+ssl://$ARTEMIS_TLS_USER:$ARTEMIS_TLS_PASS@127.0.0.1:$ARTEMIS_TLS_PORT?$(tls_query)'"
}

artemis-tls_prepare() {
  local home inst xml d; home=$(artemis_home); inst=$(artemis-tls_instance); xml=$inst/etc/broker.xml; d=$(TLS_DIR)
  if [ ! -f "$home/.complete" ]; then
    say "artemis-tls: fetching org.apache.activemq:apache-artemis:$ARTEMIS_VERSION:tar.gz:bin from Maven Central"
    local dl="$CACHE/downloads"
    mvn_copy "org.apache.activemq:apache-artemis:$ARTEMIS_VERSION:tar.gz:bin" "$dl" >>"$(logfile artemis-tls)" 2>&1 || return 1
    rm -rf "$home"
    tar -xzf "$dl/apache-artemis-$ARTEMIS_VERSION-bin.tar.gz" -C "$CACHE" || return 1
    rm -f "$dl/apache-artemis-$ARTEMIS_VERSION-bin.tar.gz"
    touch "$home/.complete"
  fi
  if [ ! -f "$xml" ]; then
    say "artemis-tls: creating the broker instance in $inst"
    mkdir -p "$STATE/artemis-tls"
    JAVA_HOME=${BQ_ARTEMIS_JAVA_HOME:-${JAVA_HOME:-}} "$home/bin/artemis" create "$inst" --silent --force \
      --user admin --password bq-artemis-admin-secret --role amq --require-login \
      --host 127.0.0.1 --name babelqueue-tls --default-port 61618 \
      --no-web --no-hornetq-acceptor --no-mqtt-acceptor --no-stomp-acceptor --no-amqp-acceptor \
      --nio --no-autotune --no-fsync --java-memory "${BQ_ARTEMIS_TLS_HEAP:-256M}" \
      >>"$(logfile artemis-tls)" 2>&1 || return 1
    sed -i 's/-Xms[0-9]*[MmGg]/-Xms64M/' "$inst/etc/artemis.profile"
  fi
  sed -i "s#^ARTEMIS_HOME=.*#ARTEMIS_HOME='$home'#" "$inst/etc/artemis.profile" "$inst/etc/artemis-utility.profile"
  # The one acceptor: AMQP over TLS. Users and roles in the properties files; the
  # security settings below (the most specific match wins, none are merged).
  local perms=""; local p
  for p in createNonDurableQueue deleteNonDurableQueue createDurableQueue deleteDurableQueue createAddress deleteAddress consume browse send; do
    perms="$perms            <permission type=\"$p\" roles=\"amq,bqrole,bqlim\"/>\n"
  done
  local dlqperms; dlqperms=$(printf '%b' "$perms" | sed 's/amq,bqrole,bqlim/amq,bqrole/')
  ACCEPTOR="         <acceptor name=\"amqps\">tcp://127.0.0.1:$ARTEMIS_TLS_PORT?sslEnabled=true;keyStorePath=$d/server.p12;keyStorePassword=babelqueue;keyStoreType=PKCS12;protocols=AMQP;saslMechanisms=PLAIN;handshake-timeout=3;useEpoll=true;amqpCredits=1000;amqpLowCredits=300;amqpDuplicateDetection=true</acceptor>" \
  SECURITY="         <security-setting match=\"#\">\n$perms            <permission type=\"manage\" roles=\"amq\"/>\n         </security-setting>\n         <security-setting match=\"*.dlq\">\n$dlqperms\n            <permission type=\"manage\" roles=\"amq\"/>\n         </security-setting>" \
  perl -0pi -e 's#<acceptors>.*?</acceptors>#<acceptors>\n$ENV{ACCEPTOR}\n      </acceptors>#s; my $s = $ENV{SECURITY}; $s =~ s/\\n/\n/g; s#<security-settings>.*?</security-settings>#<security-settings>\n$s\n      </security-settings>#s' "$xml" || return 1
  grep -q default-address-routing-type "$xml" || \
    sed -i 's#<address-setting match="\#">#<address-setting match="\#">\n            <default-address-routing-type>ANYCAST</default-address-routing-type>\n            <default-queue-routing-type>ANYCAST</default-queue-routing-type>#' "$xml"
  printf '%s\n' "admin = bq-artemis-admin-secret" "$ARTEMIS_TLS_USER = $ARTEMIS_TLS_PASS" "bqlim = $ARTEMIS_TLS_LIMITED_PASS" \
    >"$inst/etc/artemis-users.properties"
  printf '%s\n' "amq = admin" "bqrole = $ARTEMIS_TLS_USER" "bqlim = bqlim" >"$inst/etc/artemis-roles.properties"
  grep -q "$ARTEMIS_TLS_PORT?sslEnabled=true" "$xml" || { say "artemis-tls: could not set the TLS acceptor"; return 1; }
}

artemis-tls_start() {
  local inst; inst=$(artemis-tls_instance)
  local javahome=${BQ_ARTEMIS_JAVA_HOME:-${JAVA_HOME:-}}
  if [ -z "$javahome" ] && [ -n "${BQ_JAVA:-}" ]; then javahome=$(dirname "$(dirname "$BQ_JAVA")"); fi
  if [ -n "$javahome" ]; then
    start_bg artemis-tls "$inst" env JAVA_HOME="$javahome" "$inst/bin/artemis" run
  else
    start_bg artemis-tls "$inst" "$inst/bin/artemis" run
  fi
}
artemis-tls_stop() { stop_pid artemis-tls; }

# ---------------------------------------------------------------------------
# pulsar-tls: a second Pulsar standalone whose only ports are TLS (binary 6661, admin
# HTTPS 8453), with token authentication (HS256 JWTs signed by a key made here) and
# authorisation on: role admin is the super user, role bq may produce and consume in
# public/default. The tokens are files: $STATE/pulsar-tls/{admin,bq}.token.

PULSAR_TLS_PORT=6661
PULSAR_TLS_HTTP_PORT=8453

pulsar-tls_dir() { echo "$STATE/pulsar-tls"; }

# b64url — base64url without padding, of stdin.
b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }

# pulsar_token SUBJECT — an HS256 JWT {"sub": SUBJECT} signed with the key in secret.key.
pulsar_token() {
  local dir hexkey head body sig; dir=$(pulsar-tls_dir)
  hexkey=$(od -An -tx1 "$dir/secret.key" | tr -d ' \n')
  head=$(printf '{"alg":"HS256"}' | b64url)
  body=$(printf '{"sub":"%s"}' "$1" | b64url)
  sig=$(printf '%s.%s' "$head" "$body" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$hexkey" -binary | b64url)
  printf '%s.%s.%s' "$head" "$body" "$sig"
}

pulsar-tls_admin() { # pulsar-tls_admin METHOD PATH [JSON] — the admin REST API as admin
  local dir d; dir=$(pulsar-tls_dir); d=$(TLS_DIR)
  curl -fsS -m 5 --cacert "$d/ca.crt" -H "Authorization: Bearer $(cat "$dir/admin.token")" \
    -X "$1" ${3:+-H 'Content-Type: application/json' -d "$3"} "https://127.0.0.1:$PULSAR_TLS_HTTP_PORT$2"
}

pulsar-tls_probe() {
  [ -s "$(pulsar-tls_dir)/admin.token" ] || return 1
  pulsar-tls_admin GET /admin/v2/clusters 2>/dev/null | grep -q standalone \
    && tcp_open $PULSAR_TLS_PORT \
    && pulsar-tls_admin GET /admin/v2/namespaces/public 2>/dev/null | grep -q 'public/default'
}
pulsar-tls_died() { ! pid_running pulsar-tls; }
pulsar-tls_ports() { echo "$PULSAR_TLS_PORT $PULSAR_TLS_HTTP_PORT"; }
pulsar-tls_url() {
  echo "BQ_PULSAR_TLS_URL='pulsar+ssl://127.0.0.1:$PULSAR_TLS_PORT?token_file=$(pulsar-tls_dir)/bq.token&admin=https://127.0.0.1:$PULSAR_TLS_HTTP_PORT&$(tls_query)'"
}
pulsar-tls_prepare() { pulsar_prepare; }

pulsar-tls_start() {
  local home dir conf d
  home=$(pulsar_home); dir=$(pulsar-tls_dir); conf="$dir/standalone.conf"; d=$(TLS_DIR)
  rm -rf "$dir/data"   # fresh each start, as the plain one
  mkdir -p "$dir/data" "$dir/logs"
  [ -s "$dir/secret.key" ] || head -c 32 /dev/urandom >"$dir/secret.key"
  pulsar_token admin >"$dir/admin.token"
  pulsar_token bq >"$dir/bq.token"
  chmod 600 "$dir/secret.key"
  sed -e "s/^bindAddress=.*/bindAddress=127.0.0.1/" \
      -e "s/^advertisedAddress=.*/advertisedAddress=127.0.0.1/" \
      -e "s/^brokerServicePort=.*/brokerServicePort=/" \
      -e "s/^webServicePort=.*/webServicePort=/" \
      "$home/conf/standalone.conf" >"$conf"
  printf '%s\n' "" "# --- scripts/brokers/secure.sh: TLS only, tokens, authorisation ---" \
    "brokerServicePortTls=$PULSAR_TLS_PORT" "webServicePortTls=$PULSAR_TLS_HTTP_PORT" \
    "tlsCertificateFilePath=$d/server.crt" "tlsKeyFilePath=$d/server.key" "tlsTrustCertsFilePath=$d/ca.crt" \
    "brokerClientTlsEnabled=true" "brokerClientTrustCertsFilePath=$d/ca.crt" \
    "authenticationEnabled=true" \
    "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken" \
    "tokenSecretKey=file://$dir/secret.key" \
    "authorizationEnabled=true" "superUserRoles=admin" \
    "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken" \
    "brokerClientAuthenticationParameters=file://$dir/admin.token" \
    "listeningInterface=lo" "allowLoopback=true" \
    "dbStorage_writeCacheMaxSizeMb=16" "dbStorage_readAheadCacheMaxSizeMb=16" \
    "dbStorage_rocksDB_blockCacheSize=16777216" "journalSyncData=false" >>"$conf"
  start_bg pulsar-tls "$dir" env PULSAR_HOME="$home" \
    PULSAR_MEM="-Xms96m -Xmx${BQ_PULSAR_TLS_HEAP:-384m} -XX:MaxDirectMemorySize=${BQ_PULSAR_TLS_DIRECT:-192m}" \
    PULSAR_GC="-XX:+UseG1GC -XX:MaxGCPauseMillis=20" \
    PULSAR_LOG_DIR="$dir/logs" PULSAR_LOG_APPENDER=Console PULSAR_LOG_LEVEL=warn \
    PULSAR_STANDALONE_CONF="$conf" \
    "$home/bin/pulsar" standalone --no-functions-worker --no-stream-storage \
      --advertised-address 127.0.0.1 \
      --bookkeeper-dir "$dir/data/bookkeeper" \
      --metadata-dir "$dir/data/metadata"
}

# Role bq may produce and consume in public/default (idempotent).
pulsar-tls_setup() {
  pulsar-tls_admin POST /admin/v2/namespaces/public/default/permissions/bq '["produce","consume"]' >/dev/null
}
pulsar-tls_stop() { stop_pid pulsar-tls; }
