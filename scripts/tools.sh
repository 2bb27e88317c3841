#!/usr/bin/env bash
# Optional test tools, idempotent: promtool, which TestAlertRules
# (cmd/stampede) uses to run `promtool check rules` on
# deploy/prometheus/alerts.yml. Without it that check is skipped and only the
# YAML schema checks run.
#
# promtool ships in Debian's `prometheus` package; only that one binary is
# extracted to /usr/local/bin, so no Prometheus server is installed or started.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "tools.sh: promtool not installed (needs apt-get as root); TestAlertRules skips its promtool check" >&2
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
if ! apt-get download prometheus >/dev/null 2>&1; then
  apt-get update >/dev/null 2>&1 || true
  if ! apt-get download prometheus >/dev/null 2>&1; then
    echo "tools.sh: could not download Debian's prometheus package; TestAlertRules skips its promtool check" >&2
    exit 0
  fi
fi
dpkg-deb -x prometheus_*.deb root
install -m 0755 root/usr/bin/promtool /usr/local/bin/promtool
echo "tools.sh: installed $(promtool --version 2>&1 | head -1)"
