# The model loader and the fp32 reference engine.
ad_test(NAME test-model SOURCES test-model.c LIBS anedvd_cpu LABELS unit)
ad_test(NAME test-ref SOURCES test-ref.c LIBS anedvd_cpu LABELS integration)
