#!/usr/bin/env bash
# Debian packages the lab tests and benchmarks need: real FTP/HTTP servers and
# the peer download tools. Idempotent; does nothing without root (lab tests then
# skip with a message saying so).
#
# vsftpd, pure-ftpd and proftpd-core all declare `Conflicts: ftp-server`: installing
# one with apt removes the others (and the `ftp` user with it). So none is installed
# with apt here: their .debs are unpacked under /opt/pftp-lab/<pkg> (pftp_lab looks
# there first) and only their shared libraries come from apt.
set -euo pipefail
pkgs=(nginx aria2 axel lftp iperf3 iproute2 chromium curl iputils-ping wrk ethtool gcc)
bins=(nginx aria2c axel lftp iperf3 ip chromium curl ping wrk ethtool gcc)
ftp_pkgs=(vsftpd pure-ftpd proftpd-core)
ftp_bins=(vsftpd pure-ftpd proftpd)
ftp_libs=(libcap2 libpam0g libssl3 libwrap0 libsodium23 libcrypt1
  libacl1 libhiredis0.14 libmemcached11 libmemcachedutil2 libpcre2-posix3 libncursesw6)
lab_opt=/opt/pftp-lab
missing=()
for i in "${!pkgs[@]}"; do
  command -v "${bins[$i]}" >/dev/null 2>&1 || [ -x "/usr/sbin/${bins[$i]}" ] || missing+=("${pkgs[$i]}")
done
missing_ftp=()
for i in "${!ftp_pkgs[@]}"; do
  p=${ftp_pkgs[$i]}
  [ -x "$lab_opt/$p/usr/sbin/${ftp_bins[$i]}" ] || missing_ftp+=("$p")
done
[ ${#missing[@]} -eq 0 ] && [ ${#missing_ftp[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-system-deps: not root; missing ${missing[*]} ${missing_ftp[*]} (lab tests will be skipped)" >&2
  exit 0
fi
echo "install-system-deps: installing ${missing[*]} ${missing_ftp[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# One at a time: a single combined transaction has failed on held packages here.
for p in "${missing[@]}"; do
  apt-get install -y -qq --no-install-recommends "$p" >/dev/null || apt-get install -y -qq "$p" >/dev/null
done
if [ ${#missing_ftp[@]} -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${ftp_libs[@]}" >/dev/null
  tmp=$(mktemp -d)
  for p in "${missing_ftp[@]}"; do
    (cd "$tmp" && apt-get download -qq "$p" 2>/dev/null)
    mkdir -p "$lab_opt/$p"
    dpkg-deb -x "$tmp"/"$p"_*.deb "$lab_opt/$p"
  done
  rm -rf "$tmp"
fi
# Debian starts nothing here (no systemd); should nginx's postinst have launched the
# system daemon, stop that one by its pid file (never by name: labs run their own nginx).
if [[ " ${missing[*]} " == *" nginx "* ]] && [ -s /run/nginx.pid ]; then
  kill "$(cat /run/nginx.pid)" 2>/dev/null || true
fi
exit 0
