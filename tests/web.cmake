# The WebUI in a real browser: tests/web drives Debian's chromium with
# playwright-core against a scripted mock of the API (node, npm and chromium
# come from deploy/install-deps.sh --test). Set ANEDVD_WEB_URL to run the
# same tests against a running server instead; screenshots land in
# <build>/tests/web-artifacts.
add_test(NAME test-web COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/web/run.sh)
set_tests_properties(test-web PROPERTIES
	LABELS e2e
	TIMEOUT 600
	ENVIRONMENT "ANEDVD_WEB_ARTIFACTS=${CMAKE_CURRENT_BINARY_DIR}/web-artifacts")
