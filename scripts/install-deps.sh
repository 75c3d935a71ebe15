#!/usr/bin/env bash
# Installs the Debian packages soartune builds against. Idempotent: does nothing when all are present.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
      libsqlite3-dev sqlite3 libyaml-cpp-dev libspdlog-dev libgtest-dev libgmock-dev
      libeigen3-dev libcli11-dev nlohmann-json3-dev libnlopt-cxx-dev
      openssl         # the TLS tests make their certificates with it
      python3-numpy   # the independent GPTQ checkpoint decoder (tests/gptq_decode.py)
      munge slurmctld slurmd slurm-client)   # the Slurm executor's test starts a one-node cluster
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
