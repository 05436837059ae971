# Apache Pulsar standalone: the server distribution from Maven Central
# (org.apache.pulsar:pulsar-server-distribution:<v>:tar.gz:bin), run as `pulsar standalone`
# with the RocksDB metadata store, one in-process bookie (on a random loopback port), no functions
# worker, no stream storage.
# Opt-in: not in the default set (see docs/brokers.md). Sourced by scripts/brokers.sh.

pulsar_home() { echo "$CACHE/apache-pulsar-$PULSAR_VERSION"; }

# The admin API must list the standalone cluster and the binary port must accept a connection.
pulsar_probe() {
  curl -fsS -m 3 "http://127.0.0.1:$PULSAR_HTTP_PORT/admin/v2/clusters" 2>/dev/null | grep -q standalone \
    && tcp_open $PULSAR_PORT \
    && curl -fsS -m 3 "http://127.0.0.1:$PULSAR_HTTP_PORT/admin/v2/namespaces/public" 2>/dev/null | grep -q 'public/default'
}
pulsar_died() { ! pid_running pulsar; }
pulsar_ports() { echo "$PULSAR_PORT $PULSAR_HTTP_PORT"; }
pulsar_url() { echo "BQ_PULSAR_URL=pulsar://127.0.0.1:$PULSAR_PORT"; }

pulsar_prepare() {
  local home; home=$(pulsar_home)
  [ -f "$home/.complete" ] && return 0
  say "pulsar: fetching org.apache.pulsar:pulsar-server-distribution:$PULSAR_VERSION:tar.gz:bin from Maven Central (~245 MB)"
  local dl="$CACHE/downloads"
  mvn_copy "org.apache.pulsar:pulsar-server-distribution:$PULSAR_VERSION:tar.gz:bin" "$dl" >>"$(logfile pulsar)" 2>&1 || return 1
  rm -rf "$home"
  tar -xzf "$dl/pulsar-server-distribution-$PULSAR_VERSION-bin.tar.gz" -C "$CACHE" || return 1
  [ -x "$home/bin/pulsar" ] || { say "pulsar: $home/bin/pulsar missing after unpacking"; return 1; }
  # the tarball is not needed once unpacked
  rm -f "$dl/pulsar-server-distribution-$PULSAR_VERSION-bin.tar.gz"
  touch "$home/.complete"
}

pulsar_start() {
  local home dir conf
  home=$(pulsar_home); dir="$STATE/pulsar"; conf="$dir/standalone.conf"
  # A fresh data directory on every start: the tests keep nothing across broker restarts,
  # and a standalone started again on an old RocksDB metadata store can loop forever
  # re-registering its bookie (seen here: "Lock on resource /ledgers/available/... was
  # invalidated" ten million times in 40 minutes, 1.5 cores busy, every produce stuck).
  rm -rf "$dir/data"
  mkdir -p "$dir/data" "$dir/logs"
  # The distribution's standalone.conf, bound to loopback. The same file configures the bookie.
  sed -e "s/^bindAddress=.*/bindAddress=127.0.0.1/" \
      -e "s/^advertisedAddress=.*/advertisedAddress=127.0.0.1/" \
      -e "s/^brokerServicePort=.*/brokerServicePort=$PULSAR_PORT/" \
      -e "s/^webServicePort=.*/webServicePort=$PULSAR_HTTP_PORT/" \
      "$home/conf/standalone.conf" >"$conf"
  cat >>"$conf" <<CONF

# --- scripts/brokers.sh ---
# the in-process bookie: loopback only, small caches
listeningInterface=lo
allowLoopback=true
dbStorage_writeCacheMaxSizeMb=32
dbStorage_readAheadCacheMaxSizeMb=32
dbStorage_rocksDB_blockCacheSize=16777216
journalSyncData=false
CONF
  start_bg pulsar "$dir" env PULSAR_HOME="$home" \
    PULSAR_MEM="-Xms128m -Xmx${BQ_PULSAR_HEAP:-512m} -XX:MaxDirectMemorySize=${BQ_PULSAR_DIRECT:-256m}" \
    PULSAR_GC="-XX:+UseG1GC -XX:MaxGCPauseMillis=20" \
    PULSAR_LOG_DIR="$dir/logs" PULSAR_LOG_APPENDER=Console PULSAR_LOG_LEVEL=warn \
    PULSAR_STANDALONE_CONF="$conf" \
    "$home/bin/pulsar" standalone --no-functions-worker --no-stream-storage \
      --advertised-address 127.0.0.1 \
      --bookkeeper-dir "$dir/data/bookkeeper" \
      --metadata-dir "$dir/data/metadata"
}

pulsar_stop() { stop_pid pulsar; }
