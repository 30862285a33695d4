#!/usr/bin/env bash
# Install the Debian packages the test suite's real services need (idempotent, quiet).
set -euo pipefail
need=()
command -v slurmctld >/dev/null || need+=(slurmctld slurmd slurm-client munge)
command -v prometheus >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
command -v etcd >/dev/null || need+=(etcd-server)
command -v numactl >/dev/null || need+=(numactl)
command -v pg_ctl >/dev/null || [ -x /usr/lib/postgresql/15/bin/pg_ctl ] || need+=(postgresql)
command -v curl >/dev/null || need+=(curl)
command -v chromium >/dev/null || need+=(chromium)  # the web UI browser test (Playwright)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
