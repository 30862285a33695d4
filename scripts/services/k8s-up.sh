#!/usr/bin/env bash
# Start etcd + a real kube-apiserver on https://127.0.0.1:PORT with a static token; writes DIR/kubeconfig.
# Usage: k8s-up.sh DIR [PORT]
set -euo pipefail
DIR=${1:?usage: k8s-up.sh DIR [PORT]}; PORT=${2:-16443}
BIN=${K8S_BIN_CACHE:-/var/cache/k8s-apiserver}
O=${MINUTIAE_PORT_OFFSET:-0}; EC=$((12379 + O)); EP=$((12380 + O))  # etcd's ports (see up.sh)
"$(dirname "$0")/k8s-build.sh"
mkdir -p "$DIR"; cd "$DIR"
[ -f sa.key ] || { openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null; }
echo 'minutiae-test-token,admin,admin,"system:masters"' > tokens.csv
etcd --data-dir "$DIR/etcd" --listen-client-urls http://127.0.0.1:$EC --advertise-client-urls http://127.0.0.1:$EC \
     --listen-peer-urls http://127.0.0.1:$EP --initial-advertise-peer-urls http://127.0.0.1:$EP \
     --initial-cluster default=http://127.0.0.1:$EP >"$DIR/etcd.log" 2>&1 &
echo $! > etcd.pid
for _ in $(seq 1 300); do curl -sf http://127.0.0.1:$EC/health >/dev/null && break; sleep 0.1; done
"$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:$EC --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
  --secure-port="$PORT" --cert-dir="$DIR/certs" --token-auth-file="$DIR/tokens.csv" --authorization-mode=RBAC \
  --service-account-key-file="$DIR/sa.pub" --service-account-signing-key-file="$DIR/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=127.100.0.0/24 \
  --disable-admission-plugins=ServiceAccount >"$DIR/apiserver.log" 2>&1 &
echo $! > apiserver.pid
cat > "$DIR/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:$PORT", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: minutiae-test-token}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
KC
for _ in $(seq 1 600); do curl -skf -H 'Authorization: Bearer minutiae-test-token' "https://127.0.0.1:$PORT/readyz" >/dev/null && exit 0; sleep 0.2; done
echo "k8s-up: kube-apiserver did not become ready" >&2; tail -30 "$DIR/apiserver.log" >&2; exit 1
