# Sourced by .ci/run: Node.js and npm (Debian's), and the interop run's
# pinned packages (internal/interop/package-lock.json), for the guard's
# interop tests. Installed only when missing; the packages with npm ci.

node_install() {
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "== Node.js or npm is not installed and this is not root: the interop tests will skip (apt-get install nodejs npm)" >&2
    return 0
  fi
  echo "== installing Node.js and npm from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
}

interop_install() {
  node_install
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    return 0
  fi
  echo "== interop packages: npm ci --prefix internal/interop (node $(node --version), npm $(npm --version))"
  npm ci --prefix internal/interop --no-audit --no-fund --loglevel=error
  # Installed: the interop tests fail rather than skip.
  export RETRYSAFE_INTEROP_REQUIRED=1
}
