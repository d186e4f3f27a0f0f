# the shared numeric primitives (common/numeric.h) against their documented order
ad_test(NAME test-numeric SOURCES test-numeric.c LABELS unit)
