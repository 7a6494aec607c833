#!/usr/bin/env bash
# What the tests need beyond Python: Java 17 (the Spark tests start a JVM) and Debian's Chromium
# (the playground tests drive a real browser; Playwright's own browser download is not used).
# Installs whichever is missing with apt-get when it can; otherwise says so, and those tests are
# reported as skipped with this reason.
set -euo pipefail
missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "==> Not installed: ${missing[*]} (no apt-get here); the tests that need them will be skipped."
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if sudo -n true 2>/dev/null; then
        sudo="sudo"
    else
        echo "==> Not installed: ${missing[*]}; the tests that need them will be skipped."
        echo "    To run them: sudo apt-get install ${missing[*]}"
        exit 0
    fi
fi
echo "==> Installing ${missing[*]} with apt-get (for the Spark and playground tests; about 2 minutes)"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
