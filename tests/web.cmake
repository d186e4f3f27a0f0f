# The WebUI in a real browser: tests/web drives Debian's chromium with
# playwright-core against a scripted mock of the API (node, npm and chromium
# come from deploy/install-deps.sh --test). Set ANEDVD_WEB_URL to run the
# same tests against a running server instead; screenshots land in
# <build>/web-artifacts.
set(AD_WEB_DIR ${CMAKE_CURRENT_SOURCE_DIR}/web)
add_test(NAME test-web
	COMMAND sh -c "cd '${AD_WEB_DIR}' && { [ -f node_modules/playwright-core/package.json ] || npm ci --no-audit --no-fund --loglevel=error; } && exec node --test --test-reporter=spec web.test.mjs")
set_tests_properties(test-web PROPERTIES
	LABELS e2e
	TIMEOUT 300
	ENVIRONMENT "ANEDVD_WEB_ARTIFACTS=${CMAKE_CURRENT_BINARY_DIR}/web-artifacts")
