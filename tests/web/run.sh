#!/bin/sh
# run.sh - the browser tests as ctest runs them: install the pinned packages
# (npm ci) when they are missing or not the locked version, then run them.
# Extra arguments go to node --test (e.g. --test-name-pattern=stop).
set -eu
cd "$(dirname "$0")"
want=$(node -p "require('./package-lock.json').packages['node_modules/playwright-core'].version")
have=$(node -p "require('./node_modules/playwright-core/package.json').version" 2>/dev/null || true)
if [ "$want" != "$have" ]; then
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
fi
exec node --test --test-reporter=spec "$@" web.test.mjs
