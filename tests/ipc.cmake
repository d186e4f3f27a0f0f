ad_test(NAME test-ipc SOURCES test-ipc.c LABELS unit)
