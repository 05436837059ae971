# The secure variants of the brokers: each a broker process of its own, beside the plain
# one (its own ports and data under $STATE/<name>), that refuses plaintext and the default
# credentials. Their certificates come from scripts/certs.sh ($STATE/tls). See
# docs/security.md. Sourced by scripts/brokers.sh.
#
# Credentials (test-only, loopback): every secret below is a fixed test value.

TLS_DIR() { echo "$STATE/tls"; }
ensure_certs() { bash "$HERE/certs.sh" "$(TLS_DIR)" >/dev/null; }

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
