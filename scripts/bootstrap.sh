#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/debian-packages.txt that are missing.
# `bootstrap.sh build`: only those above the "--- make test" line (what building and running day0
# needs); without an argument: all of them.
# Idempotent: does nothing (quietly) when everything is present. As root it uses apt-get;
# otherwise it prints the exact command to run and fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
list="$here/debian-packages.txt"
mode="${1:-all}"
missing=()
while read -r pkg rest; do
  [[ "$mode" == build && "$pkg" == "#" && "$rest" == "--- make test"* ]] && break
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done <"$list"
[[ ${#missing[@]} -eq 0 ]] && exit 0
echo "bootstrap: missing Debian packages: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "bootstrap: run as root:  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "bootstrap: apt-get update"
apt-get update -qq
echo "bootstrap: apt-get install ${missing[*]}"
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "bootstrap: done"
