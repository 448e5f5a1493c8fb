#!/usr/bin/env bash
# Debian packages the lab tests and benchmarks need: real FTP/HTTP servers and
# the peer download tools. Idempotent; does nothing without root (lab tests then
# skip with a message saying so).
set -euo pipefail
pkgs=(vsftpd pure-ftpd nginx aria2 axel lftp iperf3 iproute2 chromium)
bins=(vsftpd pure-ftpd nginx aria2c axel lftp iperf3 ip chromium)
missing=()
for i in "${!pkgs[@]}"; do
  command -v "${bins[$i]}" >/dev/null 2>&1 || [ -x "/usr/sbin/${bins[$i]}" ] || missing+=("${pkgs[$i]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-system-deps: not root; missing ${missing[*]} (lab tests will be skipped)" >&2
  exit 0
fi
echo "install-system-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# One at a time: a single combined transaction has failed on held packages here.
for p in "${missing[@]}"; do
  apt-get install -y -qq --no-install-recommends "$p" >/dev/null || apt-get install -y -qq "$p" >/dev/null
done
# Debian starts nothing here (no systemd), but stop any daemon a postinst launched.
pkill -x vsftpd 2>/dev/null || true
pkill -x nginx 2>/dev/null || true
exit 0
