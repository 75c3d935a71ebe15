#!/usr/bin/env bash
# Installs the Debian packages soartune builds against. Idempotent: does nothing when all are present.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
      libsqlite3-dev sqlite3 libyaml-cpp-dev libspdlog-dev libgtest-dev libgmock-dev
      libeigen3-dev libcli11-dev nlohmann-json3-dev libnlopt-cxx-dev
      libcpp-httplib-dev libssl-dev nodejs npm chromium   # libssl-dev: the dashboard's HTTPS (httplib::SSLServer)
      openssl         # the TLS tests make their certificates with it
      jq              # scripts/demo.sh reads the best trial from `soartune best --json`
      clang libclang-rt-dev   # the libFuzzer targets (tests/fuzz/, scripts/fuzz.sh): clang and its runtime
      python3-numpy   # the independent GPTQ checkpoint decoder (tests/gptq_decode.py)
      munge slurmctld slurmd slurm-client)   # the Slurm executor's test starts a one-node cluster
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A nodejs from another repository that bundles npm stands in for Debian's nodejs + npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
  kept=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || kept+=("$p"); done
  missing=("${kept[@]}")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The dashboard's npm packages (ECharts; puppeteer-core for the browser tests, which drive Debian's chromium and
# download no browser), pinned by package-lock.json; installed again only when the lock file changed.
web="$(cd "$(dirname "$0")/.." && pwd)/daemon/web"
if [ ! -f "$web/node_modules/.package-lock.json" ] || [ "$web/package-lock.json" -nt "$web/node_modules/.package-lock.json" ]; then
  echo "installing the dashboard's npm packages in $web"
  (cd "$web" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi
