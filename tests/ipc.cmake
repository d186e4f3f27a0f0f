ad_test(NAME test-ipc SOURCES test-ipc.c LABELS unit)
ad_test(NAME test-rpc SOURCES test-rpc.c LIBS anedvd_rpc LABELS unit)
