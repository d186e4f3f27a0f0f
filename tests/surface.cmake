ad_test(NAME test-surface SOURCES test-surface.c LABELS unit)
