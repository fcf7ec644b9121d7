#!/usr/bin/env bash
# System packages the suite needs beyond Python: a Java runtime for Spark,
# Chromium for the browser tests, tmux for the TUI tests, ngircd for the IRC
# peer baseline (bench/peer_irc_outage.py), irssi and WeeChat (Debian's
# weechat-headless, and weechat-plugins for the FIFO its test drives it through)
# for the IRC front end's real-client tests. Installs them with
# apt when missing and running as root; otherwise says what is missing and how
# to get it.
#   bash deploy/sysdeps.sh            everything (make test)
#   bash deploy/sysdeps.sh java       only what is named: java, chromium, tmux, ngircd, irssi, weechat (make demo needs java)
set -euo pipefail
want=("$@")
[ ${#want[@]} -eq 0 ] && want=(java chromium tmux ngircd irssi weechat)
need=()
for w in "${want[@]}"; do
  case "$w" in
    java)     java -version >/dev/null 2>&1 || need+=(openjdk-17-jre-headless) ;;
    chromium) command -v chromium >/dev/null 2>&1 || need+=(chromium) ;;
    tmux)     command -v tmux >/dev/null 2>&1 || need+=(tmux) ;;
    ngircd)   [ -x /usr/sbin/ngircd ] || need+=(ngircd) ;;
    irssi)    command -v irssi >/dev/null 2>&1 || need+=(irssi) ;;
    weechat)  { command -v weechat-headless >/dev/null 2>&1 && ls /usr/lib/*/weechat/plugins/fifo.so >/dev/null 2>&1; } \
                || need+=(weechat-headless weechat-plugins) ;;
    *) echo "sysdeps: unknown dependency '$w' (java, chromium, tmux, ngircd, irssi, weechat)" >&2; exit 2 ;;
  esac
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "sysdeps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts a system-wide ngircd on install; the benchmark runs its own on free ports.
  case " ${need[*]} " in *" ngircd "*) pkill -x ngircd 2>/dev/null || true ;; esac
else
  echo "sysdeps: missing ${need[*]}: install them (e.g. sudo apt-get install ${need[*]})" >&2
  exit 1
fi
