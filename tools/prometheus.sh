#!/usr/bin/env bash
# Installs Debian's prometheus package when its binaries are missing and prints the path of the one
# asked for: `prometheus` (default; the e2e metrics tests scrape the operator with a real Prometheus,
# e2e/kubeplane/prometheus.py runs this) or `promtool` (the alert rules' unit tests,
# operator/tests/test_alert_rules.py). Debian 12 ships 2.42.0; in a container without systemd the
# package starts no service.
set -euo pipefail

binary=/usr/bin/${1:-prometheus}
case $binary in
  /usr/bin/prometheus | /usr/bin/promtool) ;;
  *) echo "usage: $0 [prometheus|promtool]" >&2; exit 2 ;;
esac
if [[ ! -x $binary ]]; then
  echo "tools: installing prometheus with apt-get ..." >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
fi
echo "$binary"
