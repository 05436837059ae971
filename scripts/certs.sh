#!/usr/bin/env bash
# scripts/certs.sh — the test PKI of the secure broker variants (scripts/brokers.sh).
#
#   scripts/certs.sh [DIR]     generate into DIR (default $BQ_STATE_DIR/tls,
#                              /tmp/babelqueue-brokers/tls); prints DIR
#
# Idempotent: a complete set that is still valid for 30 days is left as it is (so the
# brokers already running on it keep working); otherwise every file is made again.
# Needs openssl.
#
# What it makes (PEM unless said; every password of a .p12 is "babelqueue"):
#   ca.crt ca.key                  the test CA ("BabelQueue test CA")
#   server.crt server.key          signed by the CA; SAN localhost, 127.0.0.1, ::1;
#                                  server.key is PKCS#8 (Java brokers read it as is)
#   server.p12                     server.key + server.crt + ca.crt (Java key store)
#   client.crt client.key          signed by the CA, CN bq-client (mutual TLS)
#   client.p12                     client.key + client.crt
#   client-expired.crt/.key        signed by the CA, valid only in 2020
#   client-other.crt/.key          signed by the other CA (unknown to every broker)
#   server-expired.crt/.key        signed by the CA, SAN localhost/127.0.0.1, valid only in 2020
#   server-wronghost.crt/.key      signed by the CA, SAN wrong.invalid only
#   other-ca.crt other-ca.key      a second CA that nothing trusts
set -euo pipefail

STATE=${BQ_STATE_DIR:-/tmp/babelqueue-brokers}
DIR=${1:-$STATE/tls}
PASS=babelqueue
# Bump when the set of files or their contents change: an older set is made again.
GENERATION=1

say() { printf 'certs.sh: %s\n' "$*" >&2; }

complete() {
  [ "$(cat "$DIR/.generation" 2>/dev/null)" = "$GENERATION" ] || return 1
  local f
  for f in ca.crt ca.key server.crt server.key server.p12 client.crt client.key \
           client.p12 client-expired.crt client-expired.key client-other.crt client-other.key \
           server-expired.crt server-expired.key server-wronghost.crt server-wronghost.key \
           other-ca.crt other-ca.key; do
    [ -s "$DIR/$f" ] || return 1
  done
  # still valid for 30 days (2592000 s)?
  openssl x509 -checkend 2592000 -noout -in "$DIR/ca.crt" >/dev/null 2>&1 &&
    openssl x509 -checkend 2592000 -noout -in "$DIR/server.crt" >/dev/null 2>&1 &&
    openssl x509 -checkend 2592000 -noout -in "$DIR/client.crt" >/dev/null 2>&1
}

if complete; then echo "$DIR"; exit 0; fi

command -v openssl >/dev/null || { say "openssl is needed (apt-get install openssl)"; exit 1; }
say "generating the test certificates in $DIR"
mkdir -p "$DIR"
WORK=$(mktemp -d "$DIR/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

newkey() { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null; }

# ca NAME CN
ca() {
  newkey "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "/O=BabelQueue tests/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$1.crt"
}

# leaf NAME CA CN EXT [startdate enddate] — a leaf signed by CA with the extensions EXT.
# With dates, `openssl ca` signs it (the only way OpenSSL 3.0 sets a validity in the past).
leaf() {
  local name=$1 ca=$2 cn=$3 ext=$4 start=${5:-} end=${6:-}
  newkey "$name.key"
  openssl req -new -key "$name.key" -subj "/O=BabelQueue tests/CN=$cn" -out "$name.csr"
  printf '%s\n' "$ext" >"$name.ext"
  if [ -z "$start" ]; then
    openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -sha256 \
      -days 825 -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  else
    mkdir -p "ca-$name"; : >"ca-$name/index.txt"; echo 1000 >"ca-$name/serial"
    cat >"ca-$name/ca.cnf" <<EOF
[ ca ]
default_ca = test
[ test ]
dir = ca-$name
database = \$dir/index.txt
new_certs_dir = \$dir
serial = \$dir/serial
default_md = sha256
policy = any
copy_extensions = none
[ any ]
organizationName = optional
commonName = supplied
EOF
    openssl ca -batch -notext -config "ca-$name/ca.cnf" -cert "$ca.crt" -keyfile "$ca.key" \
      -startdate "$start" -enddate "$end" -extfile "$name.ext" -in "$name.csr" -out "$name.crt" 2>/dev/null
  fi
}

SERVER_EXT="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
CLIENT_EXT="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"

ca ca "BabelQueue test CA"
ca other-ca "BabelQueue other CA (trusted by nothing)"
leaf server ca localhost "$SERVER_EXT"
leaf client ca bq-client "$CLIENT_EXT"
leaf client-expired ca bq-client-expired "$CLIENT_EXT" 20200101000000Z 20200102000000Z
leaf client-other other-ca bq-client-other "$CLIENT_EXT"
leaf server-expired ca localhost "$SERVER_EXT" 20200101000000Z 20200102000000Z
leaf server-wronghost ca wrong.invalid "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:wrong.invalid"

openssl pkcs12 -export -in server.crt -inkey server.key -certfile ca.crt -name server \
  -passout "pass:$PASS" -out server.p12
openssl pkcs12 -export -in client.crt -inkey client.key -certfile ca.crt -name client \
  -passout "pass:$PASS" -out client.p12

chmod 644 ./*.crt ./*.key ./*.p12 2>/dev/null || true   # test material, read by the broker users
for f in ./*.crt ./*.key ./*.p12; do mv -f "$f" "$DIR/"; done
echo "$GENERATION" >"$DIR/.generation"
chmod 755 "$DIR"
echo "$DIR"
