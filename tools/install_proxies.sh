#!/usr/bin/env bash
# nginx and HAProxy from Debian's archive, for the load-balancer test (tests/e2e/test_load_balancer.py).
# Idempotent: nothing to do when both are installed. Never fails `make test`: without root or
# apt-get it says why, and the test skips naming what is missing. The packages' own services are
# not started (the test runs the binaries on its own ports, with deploy/local's configurations).
set -u
PATH="$PATH:/usr/sbin:/sbin"
missing=()
command -v nginx >/dev/null || missing+=(nginx)
command -v haproxy >/dev/null || missing+=(haproxy)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_proxies: ${missing[*]} not installed and this is not root with apt-get: the load-balancer test will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# Packages' services must not start here: invoke-rc.d asks policy-rc.d, and 101 means "do not".
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  trap 'rm -f "$policy"' EXIT
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
fi
install() { apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
install || { apt-get update -q >/dev/null && install; } ||
  echo "install_proxies: apt-get could not install ${missing[*]}: the load-balancer test will skip" >&2
exit 0
