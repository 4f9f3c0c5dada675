#!/bin/sh
# Makes what the compose stack needs and git must not hold (deploy/.gitignore):
#   certs/          a development CA and the TLS certificates of the NATS nodes
#                   (client and route ports) and of clients
#   auth/           the identity store: operator, accounts, verifier key, and one
#                   identity (credentials file) per process of the stack
#   nats/auth.conf  the servers' operator mode, included by nats/common.conf
#   nats/leaf-auth.conf  the same for the leaf node server (nats/leaf.conf),
#                   with the account its link names
# Run it once, from anywhere, before `docker compose up`:
#   deploy/setup.sh                      (AGENTREACH=path/to/agentreach to skip go run)
# Run again it stops, changing nothing: the identities and certificates made
# first are the ones the stack knows. To start over (new CA, new identities;
# restart the stack after):
#   deploy/setup.sh --force              (deletes certs/, auth/ and nats/auth.conf first)
# deploy/validate_test.go replays the auth lines below and checks the stack
# against what they make. Production: your own CA, and the store kept away
# from the servers (docs/security.md).
set -eu
cd "$(dirname "$0")"
AR=${AGENTREACH:-go run ../cmd/agentreach}
MADE="certs auth nats/auth.conf nats/leaf-auth.conf"

case "$*" in
--force) rm -rf $MADE ;;
"")
	for f in $MADE; do
		if [ -e "$f" ]; then
			echo "setup.sh: deploy/$f exists: this stack is set up already; 'deploy/setup.sh --force' deletes $MADE and makes them anew" >&2
			exit 1
		fi
	done
	;;
*)
	echo "usage: deploy/setup.sh [--force]" >&2
	exit 2
	;;
esac

$AR auth tls --out certs --hosts nats-1,nats-2,nats-3,leaf,localhost,127.0.0.1
$AR auth init --dir auth
$AR auth dispatcher dispatcher --dir auth
$AR auth agent echo-1 --type echo --dir auth
$AR auth agent echo-2 --type echo --dir auth
$AR auth agent slow-1 --type slow --dir auth
$AR auth agent math-1 --type math --dir auth
$AR auth caller cli --dir auth
# The leaf node server's link: the demo agents run behind it.
$AR auth leaf edge-1 --carries echo-1,echo-2,slow-1,math-1 --dir auth
$AR auth server-config --dir auth --resolver-dir /data/jwt --out nats/auth.conf
$AR auth server-config --dir auth --leaf --resolver-dir /data/jwt --out nats/leaf-auth.conf

# Private keys (nkey seeds, credentials, TLS keys) keep the mode 0600 they
# were written with; directories and the rest may be read by anyone.
find auth certs -type d -exec chmod a+rx {} +
find auth certs nats/auth.conf nats/leaf-auth.conf -type f ! -name '*.nk' ! -name '*.creds' ! -name '*-key.pem' -exec chmod a+r {} +
# The agentreach containers run as uid 65532 (distroless nonroot) and read
# their credentials through bind mounts: give them the store (the nats
# containers run as root). On a shared host use docker secrets instead.
if [ "$(id -u)" = 0 ]; then
	chown -R 65532:65532 auth
else
	echo "setup.sh: the agentreach containers run as uid 65532: 'sudo chown -R 65532:65532 deploy/auth' lets them read their credentials" >&2
fi
