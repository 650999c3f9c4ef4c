#!/usr/bin/env bash
# System packages the tests and the demo need: redis-server (+ redis-benchmark), prometheus (+ promtool),
# chromium, and python3-venv for the virtualenv. Debian/Ubuntu only; a no-op when everything is already there (so it
# needs root or sudo only when something is missing). With arguments, installs just those packages
# (`./dev lint` asks only for python3-venv, and only when it is missing).
set -euo pipefail
need=()
if [ $# -gt 0 ]; then
  need=("$@")
else
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools)
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)
  # the fold's instruction-count guard (tests/unit/test_fold_cost.py): callgrind, and gcc for its client requests
  command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
  command -v gcc >/dev/null 2>&1 || need+=(gcc)
  # the /docs page rendered in a real browser (tests/integration/test_api_docs_browser.py), driven by Playwright
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
fi
if [ ${#need[@]} -gt 0 ]; then
  sudo_=""
  [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# Debian's packages start their own services; hotboard's tests and demo start their own on free ports.
