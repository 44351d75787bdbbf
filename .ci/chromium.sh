# Sourced by .ci/run: Debian's Chromium, for the console's real-browser
# test (agenttool/console, with chromedp). Installed only when missing.

chromium_install() {
  if [ -x /usr/bin/chromium ]; then
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "== Chromium is not installed and this is not root: the console's browser test will skip (apt-get install chromium)" >&2
    return 0
  fi
  echo "== installing Chromium from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null
}
