#!/usr/bin/env bash
# prometheus.sh: install (idempotently) what the otel module's dashboard test needs:
# Debian's prometheus package (the test starts a private Prometheus on a loopback port,
# lets it scrape a real run and evaluates every panel of docs/grafana-dashboard.json;
# its promtool unit-tests docs/alerts.yml in scripts/test.sh)
# and Debian's chromium (headless, for the screenshot of Prometheus's graph page; the
# console's browser tests use it too, and NSS's certutil for its HTTPS test).
# Nothing is started: the test runs its own processes and stops them.
#
# Prints two lines, the paths of the prometheus and chromium binaries; the otel tests
# read them from $BQ_PROMETHEUS and $BQ_CHROMIUM (scripts/test.sh exports both).
set -euo pipefail

log() { echo "prometheus.sh: $*" >&2; }

need=()
command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ] || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || need+=(chromium)
# certutil, for the console's HTTPS test: it trusts the test CA in a private NSS database.
command -v certutil >/dev/null 2>&1 || need+=(libnss3-tools)

if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]} (apt-get)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -y >/dev/null
  # --no-install-recommends: no prometheus-node-exporter and friends, no fonts-* sets.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
  # The package enables and starts a system Prometheus on :9090 where an init system
  # runs; the tests never use it (they start their own on a free port).
fi

command -v prometheus || echo /usr/bin/prometheus
command -v chromium || echo /usr/bin/chromium
