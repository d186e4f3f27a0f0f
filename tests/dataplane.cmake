# The shared-memory data plane between kb_remote and the ane-worker
ad_test(NAME test-dataplane SOURCES test-dataplane.c LABELS unit TIMEOUT 120)
