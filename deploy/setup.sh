#!/bin/sh
# Makes what the compose stack needs and git must not hold (deploy/.gitignore):
#   certs/          a development CA and the TLS certificates of the NATS nodes
#                   (client and route ports) and of clients
#   auth/           the identity store: operator, accounts, verifier key, and one
#                   identity (credentials file) per process of the stack
#   nats/auth.conf  the servers' operator mode, included by nats/common.conf
# Run it once, from anywhere, before `docker compose up`:
#   deploy/setup.sh                      (AGENTREACH=path/to/agentreach to skip go run)
# deploy/validate_test.go replays the auth lines below and checks the stack
# against what they make. Production: your own CA, and the store kept away
# from the servers (docs/security.md).
set -eu
cd "$(dirname "$0")"
AR=${AGENTREACH:-go run ../cmd/agentreach}

$AR auth tls --out certs --hosts nats-1,nats-2,nats-3,localhost,127.0.0.1
$AR auth init --dir auth
$AR auth dispatcher dispatcher --dir auth
$AR auth agent echo-1 --type echo --dir auth
$AR auth agent echo-2 --type echo --dir auth
$AR auth agent slow-1 --type slow --dir auth
$AR auth agent math-1 --type math --dir auth
$AR auth caller cli --dir auth
$AR auth server-config --dir auth --resolver-dir /data/jwt --out nats/auth.conf

# The agentreach containers run as uid 65532 (distroless nonroot) and read
# their credentials through bind mounts: let them. On a shared host use
# docker secrets instead.
chmod -R a+rX auth certs
