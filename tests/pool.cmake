# the shared thread pool (common/pool.h)
ad_test(NAME test-pool SOURCES test-pool.c LABELS unit)
