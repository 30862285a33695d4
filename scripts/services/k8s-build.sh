#!/usr/bin/env bash
# Build a real kube-apiserver from Debian's `kubernetes` source package once, cached in $K8S_BIN_CACHE.
set -euo pipefail
BIN=${K8S_BIN_CACHE:-/var/cache/k8s-apiserver}
[ -x "$BIN/kube-apiserver" ] && exit 0
mkdir -p "$BIN"
# deb-src lines derived from this machine's own apt sources (never name a registry host here)
if [ ! -f /etc/apt/sources.list.d/src-from-debian.sources ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > /etc/apt/sources.list.d/src-from-debian.sources
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go dpkg-dev rsync etcd-server openssl curl >/dev/null
SRC=$(mktemp -d); cd "$SRC"
apt-get source -qq kubernetes >/dev/null 2>&1
cd kubernetes-*/
mkdir -p .go/src/k8s.io && ln -sfn ../../.. .go/src/k8s.io/kubernetes
env GOPATH="$PWD/.go" CGO_ENABLED=0 HOME="$SRC" GOLDFLAGS="-s -w" make WHAT=cmd/kube-apiserver >"$SRC/build.log" 2>&1 \
  || { tail -30 "$SRC/build.log" >&2; exit 1; }
cp _output/bin/kube-apiserver "$BIN/"; cd /; rm -rf "$SRC"
