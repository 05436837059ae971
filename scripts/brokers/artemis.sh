# Apache ActiveMQ Artemis: the binary distribution from Maven Central
# (org.apache.activemq:apache-artemis:<v>:tar.gz:bin), one broker instance under $STATE.
# Sourced by scripts/brokers.sh.

artemis_home() { echo "$CACHE/apache-artemis-$ARTEMIS_VERSION"; }
artemis_instance() { echo "$STATE/artemis/instance"; }

# AMQP 1.0 over SASL: send the SASL protocol header, the broker must echo it (AMQP 3.1.0.0),
# and the broker log must say the server is live.
artemis_probe() {
  [ "$(tcp_exchange $ARTEMIS_AMQP_PORT 414d515003010000 8)" = 414d515003010000 ] || return 1
  grep -q 'AMQ221007' "$(logfile artemis)" 2>/dev/null || ! pid_running artemis
}
artemis_died() { ! pid_running artemis; }
artemis_ports() { echo "$ARTEMIS_AMQP_PORT $ARTEMIS_CORE_PORT"; }
artemis_url() { echo "BQ_ARTEMIS_URL=artemis://artemis:artemis@127.0.0.1:$ARTEMIS_AMQP_PORT"; }

# artemis_fetch [LOGNAME] — the distribution into the cache (once), logged to LOGNAME's log.
artemis_fetch() {
  local home log=${1:-artemis}; home=$(artemis_home)
  [ -f "$home/.complete" ] && return 0
  say "$log: fetching org.apache.activemq:apache-artemis:$ARTEMIS_VERSION:tar.gz:bin from Maven Central"
  local dl="$CACHE/downloads"
  mvn_copy "org.apache.activemq:apache-artemis:$ARTEMIS_VERSION:tar.gz:bin" "$dl" >>"$(logfile "$log")" 2>&1 || return 1
  rm -rf "$home"
  tar -xzf "$dl/apache-artemis-$ARTEMIS_VERSION-bin.tar.gz" -C "$CACHE" || return 1
  [ -x "$home/bin/artemis" ] || { say "$log: $home/bin/artemis missing after unpacking"; return 1; }
  rm -f "$dl/apache-artemis-$ARTEMIS_VERSION-bin.tar.gz"
  touch "$home/.complete"
}

artemis_prepare() {
  local home; home=$(artemis_home)
  artemis_fetch artemis || return 1
  local inst; inst=$(artemis_instance)
  if [ -f "$inst/etc/broker.xml" ]; then
    # the instance names the distribution it was created from; point it at this cache
    sed -i "s#^ARTEMIS_HOME=.*#ARTEMIS_HOME='$home'#" "$inst/etc/artemis.profile" "$inst/etc/artemis-utility.profile"
    # and at the heap asked for now (an instance made with an older, smaller default)
    sed -i "s/-Xmx[0-9]*[MmGg]/-Xmx${BQ_ARTEMIS_HEAP:-1G}/" "$inst/etc/artemis.profile"
    return 0
  fi
  say "artemis: creating the broker instance in $inst"
  mkdir -p "$STATE/artemis"
  JAVA_HOME=${BQ_ARTEMIS_JAVA_HOME:-${JAVA_HOME:-}} "$home/bin/artemis" create "$inst" --silent --force \
    --user artemis --password artemis --role amq --allow-anonymous \
    --host 127.0.0.1 --name babelqueue --default-port $ARTEMIS_CORE_PORT \
    --no-web --no-hornetq-acceptor --no-mqtt-acceptor --no-stomp-acceptor \
    --nio --no-autotune --no-fsync --java-memory "${BQ_ARTEMIS_HEAP:-1G}" \
    >>"$(logfile artemis)" 2>&1 || return 1
  local xml="$inst/etc/broker.xml"
  # AMQP acceptor on 5673 (RabbitMQ owns 5672).
  sed -i "s#tcp://127.0.0.1:5672?#tcp://127.0.0.1:$ARTEMIS_AMQP_PORT?#" "$xml"
  grep -q "tcp://127.0.0.1:$ARTEMIS_AMQP_PORT?" "$xml" || { say "artemis: could not move the AMQP acceptor"; return 1; }
  # Queue semantics for auto-created addresses: a plain AMQP link to "orders" gets an anycast queue.
  sed -i 's#<address-setting match="\#">#<address-setting match="\#">\n            <default-address-routing-type>ANYCAST</default-address-routing-type>\n            <default-queue-routing-type>ANYCAST</default-queue-routing-type>#' "$xml"
  # The generated profile sets -Xms512M whatever --java-memory says; a small initial heap.
  sed -i 's/-Xms[0-9]*[MmGg]/-Xms64M/' "$inst/etc/artemis.profile"
}

artemis_start() {
  local inst; inst=$(artemis_instance)
  local javahome=${BQ_ARTEMIS_JAVA_HOME:-${JAVA_HOME:-}}
  if [ -z "$javahome" ] && [ -n "${BQ_JAVA:-}" ]; then javahome=$(dirname "$(dirname "$BQ_JAVA")"); fi
  if [ -n "$javahome" ]; then
    start_bg artemis "$inst" env JAVA_HOME="$javahome" "$inst/bin/artemis" run
  else
    start_bg artemis "$inst" "$inst/bin/artemis" run
  fi
}

artemis_stop() { stop_pid artemis; }
