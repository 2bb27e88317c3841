#!/usr/bin/env bash
# Test tools, idempotent:
#
#  - golangci-lint, pinned (GOLANGCI_LINT_VERSION below), which `make lint`
#    (part of `make test`) runs with .golangci.yml. It is built with
#    `go install …@version` into $(go env GOPATH)/bin: the module proxy
#    serves it like any Go module, the build is reproducible from the
#    version's own go.mod, and none of its ~300 dependencies enter
#    Stampede's go.mod (a `tool` directive would put them there and let them
#    constrain the versions of the project's own dependencies). Required:
#    the script fails if it cannot be installed.
#    A fresh machine builds it from source; nothing prebuilt serves here
#    (checked 2026-12-02 on the Debian bookworm build machine): apt has no
#    golangci-lint package (`apt-cache policy golangci-lint` and
#    `apt-cache search golangci` print nothing after `apt-get update`), the
#    Go module proxy serves source only, GitHub release downloads do not
#    resolve from this network, and the only golangci-lint binary on the
#    machine (hdrhistogram-go@v1.4.0/bin/golangci-lint in the module cache)
#    is a Mach-O arm64 build. The build, measured once with an empty module
#    cache and build cache (`GOPATH=/tmp/lintgp GOCACHE=/tmp/lintgp/cache
#    nice -n 19 go install …@v2.15.0`, 313 MB of modules downloaded): 3 min
#    21 s of CPU (159 s user, 42 s system) and 50 min wall clock, at nice 19
#    on 2 cores with a load average of 15-40 from other builds. The binary in
#    $(go env GOPATH)/bin is reused while it reports this version, so only
#    the first `make lint` on a machine pays it.
#  - promtool, optional, which TestAlertRules (package app) uses to run
#    `promtool check rules` on deploy/prometheus/alerts.yml. Without it that
#    check is skipped and only the YAML schema checks run. promtool ships in
#    Debian's `prometheus` package; only that one binary is extracted to
#    /usr/local/bin, so no Prometheus server is installed or started.
set -euo pipefail

GOLANGCI_LINT_VERSION=v2.15.0

install_golangci_lint() {
  local bin
  bin="$(go env GOPATH)/bin/golangci-lint"
  if [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q "version ${GOLANGCI_LINT_VERSION#v} "; then
    return 0
  fi
  echo "tools.sh: installing golangci-lint ${GOLANGCI_LINT_VERSION} (go install; a few minutes the first time)" >&2
  GOFLAGS= go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@${GOLANGCI_LINT_VERSION}"
}

install_promtool() {
  if command -v promtool >/dev/null 2>&1; then
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "tools.sh: promtool not installed (needs apt-get as root); TestAlertRules skips its promtool check" >&2
    return 0
  fi
  local tmp rc=0
  tmp=$(mktemp -d)
  (
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
  ) || rc=$?
  rm -rf "$tmp"
  return "$rc"
}

case "${1:-all}" in
  lint) install_golangci_lint ;;
  all) install_golangci_lint; install_promtool ;;
  *) echo "usage: tools.sh [lint|all]" >&2; exit 2 ;;
esac
