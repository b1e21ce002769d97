/*
 * The "fakecuda" fixture plugin (tests/gpuplug/fakecuda.c): the GPU glue of
 * the cuda and rocm plugins (plugins/cuda/gpu_plugin.c) over the GPU
 * emulator's api table (tests/gpu), registered as vendor "cuda" on CUDA
 * tensors that are really host memory. It wraps the emulator's table to
 * pretend to have FAKECUDA_DEVICES devices (default 2) with a per-thread
 * current device, and records what the glue passed, for the tests to read
 * through these functions (dlsym on the loaded plugin).
 *
 * Environment, read at registration:
 *   FAKECUDA_DEVICES=n        device count (0: "no device")
 *   FAKECUDA_COUNT_ERROR=code device_count() fails with that emulator code
 */
#ifndef FLD_TESTS_GPUPLUG_FAKECUDA_H
#define FLD_TESTS_GPUPLUG_FAKECUDA_H

#define FAKECUDA_EXPORT __attribute__((visibility("default")))

struct fakecuda_record {
    void *stream;      /* of the last kernel, copy or synchronize */
    int variant;       /* of the last kernel: FLD_GPU_REFERENCE / FLD_GPU_VECTOR; -1 none */
    int device;        /* current device during the last kernel, copy or alloc */
    int kernels;       /* kernel launches that reached the emulator */
    int set_device;    /* set_device() calls */
    int memcpy_kind;   /* of the last copy; -1 none */
    int synchronizes;  /* stream_synchronize() calls */
    int device_counts; /* device_count() calls (the probe that initialises a driver) */
};

/* What has been recorded in this process so far. */
FAKECUDA_EXPORT void fakecuda_record_get(struct fakecuda_record *out);
/* The calling thread's current device, and setting it (as cudaSetDevice). */
FAKECUDA_EXPORT int fakecuda_current_device(void);
FAKECUDA_EXPORT void fakecuda_set_current_device(int device);
/* The next kernel launch returns code without running. */
FAKECUDA_EXPORT void fakecuda_fail_next_launch(int code);

typedef void (*fakecuda_record_get_fn)(struct fakecuda_record *out);
typedef int (*fakecuda_current_device_fn)(void);
typedef void (*fakecuda_set_current_device_fn)(int device);
typedef void (*fakecuda_fail_next_launch_fn)(int code);

#endif
