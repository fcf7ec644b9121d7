#!/usr/bin/env bash
# System packages the suite needs beyond Python: a Java runtime for Spark and
# Chromium for the browser tests. Installs them with apt when missing and
# running as root; otherwise says what is missing and how to get it.
set -euo pipefail
need=()
if ! java -version >/dev/null 2>&1; then need+=(openjdk-17-jre-headless); fi
if ! command -v chromium >/dev/null 2>&1; then need+=(chromium); fi
if ! command -v tmux >/dev/null 2>&1; then need+=(tmux); fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "sysdeps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
  echo "sysdeps: missing ${need[*]}: install them (e.g. sudo apt-get install ${need[*]})" >&2
  exit 1
fi
