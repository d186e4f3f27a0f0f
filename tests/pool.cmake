# the shared thread pool (common/pool.h)
ad_test(NAME test-pool SOURCES test-pool.c LABELS unit)

# the streaming-read baseline (common/memread.h)
ad_test(NAME test-memread SOURCES test-memread.c LABELS unit)
