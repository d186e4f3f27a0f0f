# the shared thread pool (common/pool.h)
ad_test(NAME test-pool SOURCES test-pool.c LABELS unit)

# the streaming-read baseline (common/memread.h)
ad_test(NAME test-memread SOURCES test-memread.c LABELS unit)

# buffers and an arena on huge pages (common/hugemem.h)
ad_test(NAME test-hugemem SOURCES test-hugemem.c LABELS unit)
