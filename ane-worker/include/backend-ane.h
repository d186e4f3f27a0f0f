// backend-ane.h - the builder's "ane" backend: a kernel compiled and run
// on the Neural Engine through the shim (shim/ane-shim.h).
//
// Only built where ANEDVD_ANE is on (macOS on Apple silicon); build.c
// calls it under #ifdef ANEDVD_ANE.
//
// A kernel here has the same contract as an emu kernel: one fp16 input and
// one fp16 output of height 1, host surfaces laid out as layout.h says
// (the seed formula, which is what surface.h shares between processes),
// allocated at ane_dev_input_capacity / ane_dev_output_capacity bytes.
// The compiled model reports its own strides; they are read back at
// compile time, logged when they differ from the formula, and each eval
// re-strides the first ncols columns into the device's surface and the
// result back out. That is the copy path; ane_dev_io_path names the path
// a kernel uses, so callers can report it.
#ifndef ANE_BACKEND_ANE_H
#define ANE_BACKEND_ANE_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

struct ane_dev;

// 0 if the framework and its classes resolved, else -1 with the reason
int ane_dev_init(char *err);
// one line for `anedvd info`
const char *ane_dev_describe(void);

// mil names one weight file, @model_path/weights/<wname>, read from wpath
struct ane_dev *ane_dev_compile(const char *mil, const char *wname, const char *wpath, char *err);
void ane_dev_free(struct ane_dev *d);

size_t ane_dev_width(const struct ane_dev *d);
int ane_dev_in_channels(const struct ane_dev *d);
int ane_dev_out_channels(const struct ane_dev *d);
// host layouts and capacities (layout.h), and the device's own strides as text
const struct ane_layout *ane_dev_input_layout(const struct ane_dev *d);
const struct ane_layout *ane_dev_output_layout(const struct ane_dev *d);
size_t ane_dev_input_capacity(const struct ane_dev *d);
size_t ane_dev_output_capacity(const struct ane_dev *d);
const char *ane_dev_strides(const struct ane_dev *d);
uint64_t ane_dev_compile_us(const struct ane_dev *d); // compile + load
uint64_t ane_dev_weight_bytes(const struct ane_dev *d);
const char *ane_dev_io_path(const struct ane_dev *d);

// in / out: host surfaces of the layouts above; ncols in 1..width. With
// surfaces bound (below) in / out are not read or written: the device
// works on the bound IOSurfaces directly.
int ane_dev_eval(struct ane_dev *d, const void *in, void *out, int ncols, char *err);

// zero-copy: bind IOSurfaceRefs (as void *) another process created, laid
// out as the device's strides (ane_dev_strides), as the kernel's input and
// output. Unverified on the device: the shim checks the binding with one
// eval, and on refusal the kernel stays on the copy path (-1 with why).
// common/surface.h surfaces are POSIX shared memory, so nothing calls
// this yet.
int ane_dev_bind(struct ane_dev *d, void *in_iosurface, void *out_iosurface, char *err);

#endif
