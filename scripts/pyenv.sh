#!/usr/bin/env bash
# pyenv.sh: create (or reuse) the Python virtual environment holding the
# reference Python SDK, babelqueue==1.24.0, used by the interop and
# differential tests. Idempotent and non-interactive.
#
#   BQ_PYENV   where the venv lives (default <repo>/.cache/pyenv)
#   PYTHON     the interpreter that creates it (default python3)
#
# The last line printed is the venv's python path.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BQ_PYENV:-$repo/.cache/pyenv}"
py="${PYTHON:-python3}"
version="1.24.0"
# Transport and integration extras declared by babelqueue 1.24.0's METADATA
# (dev is tooling only and is left out).
extras=(redis amqp sqs azureservicebus pulsar kafka artemis otel gdpr celery django)

log() { echo "pyenv.sh: $*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$(dirname "$venv")"
  if ! "$py" -m venv "$venv" >/dev/null 2>&1; then
    log "python venv module missing; installing python3-venv"
    rm -rf "$venv"
    if command -v apt-get >/dev/null 2>&1; then
      SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -y >/dev/null
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv >/dev/null
    fi
    "$py" -m venv "$venv"
  fi
fi

vpy="$venv/bin/python"
pipq=("$vpy" -m pip install --disable-pip-version-check --no-input -q)

if ! "$vpy" -c "import importlib.metadata as m, sys; sys.exit(m.version('babelqueue') != '$version')" 2>/dev/null; then
  "${pipq[@]}" "babelqueue==$version" >&2
fi

# Extras: each is tried on its own so one that cannot install here does not
# block the others. A stamp file remembers the ones already done.
stamp="$venv/.bq-extras"
touch "$stamp"
failed=()
for x in "${extras[@]}"; do
  grep -qx "$x" "$stamp" && continue
  if "${pipq[@]}" "babelqueue[$x]==$version" >&2 2>"$venv/.bq-extra-$x.log"; then
    echo "$x" >>"$stamp"
  else
    failed+=("$x")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  log "extras that did not install: ${failed[*]} (logs: $venv/.bq-extra-<name>.log)"
fi
log "installed extras: $(tr '\n' ' ' <"$stamp")"

# The otel extra brings opentelemetry-api only; the otel module's interop tests record
# the Python spans with the SDK's in-memory exporter, so the SDK of the same version.
if grep -qx otel "$stamp" && ! "$vpy" -c "import opentelemetry.sdk.trace" 2>/dev/null; then
  api="$("$vpy" -c "import importlib.metadata as m; print(m.version('opentelemetry-api'))")"
  # The newest API can be out before its SDK: then the newest SDK, which brings the API
  # it was released with.
  "${pipq[@]}" "opentelemetry-sdk==$api" >&2 || "${pipq[@]}" opentelemetry-sdk >&2 ||
    log "opentelemetry-sdk did not install (neither $api nor the newest)"
fi

echo "$vpy"
