#!/usr/bin/env bash
# Build the documentation site and take screenshots of its home page, the configuration reference
# and the methods page in headless Chromium (Debian's `chromium` package), to look at the site as
# a reader does.
#
#   bash scripts/docs_screenshots.sh [OUT]      # PNGs in OUT (default: docs-screenshots/)
#
# The site loads MathJax from a CDN; for a machine without one, MathJax is fetched from the npm
# registry (`npm pack`, cached in OUT/.mathjax) and the built pages point at that copy instead.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-docs-screenshots}")
MATHJAX_VERSION=3.2.2
CDN="https://cdn.jsdelivr.net/npm/mathjax@${MATHJAX_VERSION}/es5/tex-mml-chtml.js"
BROWSER=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$BROWSER" ]; then
  echo "[docs_screenshots] needs Chromium: apt-get install chromium" >&2
  exit 2
fi
PYTHON=${PYTHON:-.venv/bin/python}
SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT
mkdir -p "$OUT"
NO_MKDOCS_2_WARNING=1 "$PYTHON" -m mkdocs build --strict --quiet --site-dir "$SITE"

if ! grep -rqF "$CDN" "$SITE/methods/index.html"; then
  echo "[docs_screenshots] the site no longer loads $CDN: update MATHJAX_VERSION" >&2
  exit 1
fi
if [ ! -f "$OUT/.mathjax/package/es5/tex-mml-chtml.js" ] && command -v npm >/dev/null; then
  mkdir -p "$OUT/.mathjax"
  (cd "$OUT/.mathjax" && npm pack --silent "mathjax@${MATHJAX_VERSION}" >/dev/null \
    && tar -xzf "mathjax-${MATHJAX_VERSION}.tgz")
fi
if [ -f "$OUT/.mathjax/package/es5/tex-mml-chtml.js" ]; then
  cp -r "$OUT/.mathjax/package/es5" "$SITE/mathjax"
  grep -rlF "$CDN" "$SITE" --include=*.html | while read -r page; do
    depth=$(realpath --relative-to="$SITE" "$(dirname "$page")" | awk -F/ '$0=="."{print 0; next}{print NF}')
    prefix=$(printf '../%.0s' $(seq 1 "$depth"))
    sed -i "s#${CDN}#${prefix}mathjax/tex-mml-chtml.js#" "$page"
  done
else
  echo "[docs_screenshots] no MathJax copy (npm missing or offline): equations show as TeX" >&2
fi

for shot in "home:index.html" "configuration-reference:reference/configuration/index.html" \
            "methods:methods/index.html"; do
  name=${shot%%:*}
  page=${shot#*:}
  "$BROWSER" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1600 \
    --virtual-time-budget=10000 --screenshot="$OUT/$name.png" "file://$SITE/$page" \
    >/dev/null 2>&1
  echo "[docs_screenshots] $OUT/$name.png"
done
