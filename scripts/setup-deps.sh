#!/usr/bin/env bash
# Installs the Debian packages wds needs to build, test and run its demo, if any is missing, and
# Azurite (the Azure Storage emulator the Azure tests run against) from npm.
# Idempotent: when everything is installed it only checks (a fraction of a second).
set -euo pipefail

packages=(
  g++ cmake ninja-build ccache pkg-config git tar python3 curl nginx-light
  libarchive-dev libcurl4-openssl-dev libssl-dev libopencv-dev libjpeg62-turbo-dev libdlpack-dev python3-numpy nlohmann-json3-dev
  libgtest-dev libbenchmark-dev libcli11-dev openmpi-bin libopenmpi-dev
  clang libclang-rt-14-dev zlib1g-dev
  radosgw ceph-mon ceph-osd ceph-common
  libzmq3-dev cppzmq-dev
  pybind11-dev python3-dev python3-pytest python3-torch python3-torchvision python3-pil
  python3-venv python3-setuptools python3-wheel
  python3-msgpack
  libavformat-dev libavcodec-dev libswresample-dev libswscale-dev libavutil-dev ffmpeg
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm for Azurite, from Debian unless some other install already provides them.
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-deps: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
if ! command -v azurite-blob >/dev/null; then
  echo "setup-deps: installing azurite (npm)"
  "${sudo[@]}" npm install -g --no-fund --no-audit azurite >/dev/null
fi
[ ${#missing[@]} -eq 0 ] || echo "setup-deps: done"
