#!/usr/bin/env bash
# Linkerd's identity certificates, made as Linkerd's docs make them with `step certificate
# create` (profiles root-ca and intermediate-ca, ECDSA P-256), with openssl:
#
#   DIR/ca.crt, ca.key          the trust anchor, CN root.linkerd.cluster.local, a CA, 10 years
#   DIR/issuer.crt, issuer.key  the issuer, CN identity.linkerd.cluster.local, a CA with path
#                               length 0, signed by the trust anchor, 1 year
#
# for `linkerd install --identity-trust-anchors-file DIR/ca.crt
# --identity-issuer-certificate-file DIR/issuer.crt --identity-issuer-key-file DIR/issuer.key`.
# Used by vagrant/linkerd.sh and tests/node/linkerd.rs.
#
# Usage: vagrant/linkerd-identity.sh DIR   (DIR is created; the issuer is verified against
# the trust anchor; exits non-zero with openssl's message on a failure)
set -euo pipefail
dir=${1:?usage: linkerd-identity.sh DIR}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
  -subj /CN=root.linkerd.cluster.local -keyout ca.key -out ca.crt \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -subj /CN=identity.linkerd.cluster.local -keyout issuer.key -out issuer.csr 2>/dev/null
printf 'basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n' >issuer.ext
openssl x509 -req -in issuer.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
  -extfile issuer.ext -out issuer.crt 2>/dev/null
openssl verify -CAfile ca.crt issuer.crt >/dev/null
