#!/usr/bin/env bash
# Installs Debian's prometheus package when /usr/bin/prometheus is missing (the e2e metrics tests
# scrape the operator with a real Prometheus; e2e/kubeplane/prometheus.py runs this) and prints the
# binary's path. Debian 12 ships 2.42.0; in a container without systemd the package starts no service.
set -euo pipefail

binary=/usr/bin/prometheus
if [[ ! -x $binary ]]; then
  echo "tools: installing prometheus with apt-get ..." >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
fi
echo "$binary"
