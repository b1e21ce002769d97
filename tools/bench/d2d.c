/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The memory bandwidth ceiling of bench on devices other than the CPU: a
 * device-to-device copy of a large buffer through fld_device_copy(), timed
 * on the CPU clock around batches of copies that end with
 * fld_device_synchronize(), as the kernels are timed. Bytes are counted as
 * STREAM's copy counts them: the buffer read once and written once. A GPU
 * vendor's bandwidth test (cudaMemcpy device to device) counts the same way.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/fldispatch.h>

#include "bench.h"

#define FILL_CHUNK ((size_t)16 << 20)

struct bench_d2d {
    DLDevice device;
    void *src, *dst;
    size_t bytes;
};

size_t bench_d2d_bytes(const struct bench_d2d *d)
{
    return d->bytes;
}

void bench_d2d_close(struct bench_d2d *d)
{
    if (!d)
        return;
    if (d->src)
        fld_device_free(d->device, d->src);
    if (d->dst)
        fld_device_free(d->device, d->dst);
    free(d);
}

/* The source gets numbers rather than whatever the allocator left: some devices compress zeros. */
static bool fill(struct bench_d2d *d)
{
    size_t chunk = d->bytes < FILL_CHUNK ? d->bytes : FILL_CHUNK;
    float *staging = malloc(chunk);
    if (!staging) {
        fprintf(stderr, "fldispatch bench: out of memory for the d2d copy's fill buffer\n");
        return false;
    }
    for (size_t i = 0; i < chunk / sizeof *staging; i++)
        staging[i] = (float)(i % 1021) * 0.5f - 255.0f;
    bool ok = true;
    for (size_t off = 0; off < d->bytes && ok; off += chunk) {
        size_t n = d->bytes - off < chunk ? d->bytes - off : chunk;
        ok = fld_device_copy(d->device, (char *)d->src + off, staging, n,
                             FLD_COPY_HOST_TO_DEVICE) == FLD_OK;
    }
    free(staging);
    if (!ok)
        fprintf(stderr, "fldispatch bench: filling the d2d copy's source: %s\n", fld_last_error());
    return ok;
}

struct bench_d2d *bench_d2d_open(int device_type, size_t bytes)
{
    struct bench_d2d *d = calloc(1, sizeof *d);
    if (!d) {
        fprintf(stderr, "fldispatch bench: out of memory\n");
        return NULL;
    }
    d->device = (DLDevice){(DLDeviceType)device_type, 0};
    d->bytes = bytes;
    if (fld_device_alloc(d->device, bytes, &d->src) != FLD_OK ||
        fld_device_alloc(d->device, bytes, &d->dst) != FLD_OK) {
        fprintf(stderr, "fldispatch bench: two %zu MiB buffers for the d2d copy baseline: %s\n",
                bytes >> 20, fld_last_error());
        bench_d2d_close(d);
        return NULL;
    }
    if (!fill(d)) {
        bench_d2d_close(d);
        return NULL;
    }
    return d;
}

/* Nanoseconds for n copies and the synchronisation after them; NAN when one failed. */
static double time_copies(struct bench_d2d *d, long n)
{
    int failed = 0;
    double t0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        failed |= fld_device_copy(d->device, d->dst, d->src, d->bytes, FLD_COPY_DEVICE_TO_DEVICE);
    failed |= fld_device_synchronize(d->device);
    double t1 = bench_now_ns();
    if (failed) {
        fprintf(stderr, "fldispatch bench: d2d copy: %s\n", fld_last_error());
        return NAN;
    }
    return t1 - t0;
}

double bench_d2d_measure(struct bench_d2d *d, int reps, double batch_ns)
{
    double ns = time_copies(d, 1); /* warm-up: first touch, clocks up */
    if (isnan(ns))
        return NAN;
    ns = time_copies(d, 1);
    if (isnan(ns))
        return NAN;
    double want = ceil(batch_ns / (ns > 0 ? ns : 1.0));
    long n = want < 1 ? 1 : want > 1e6 ? 1000000L : (long)want;
    double *gbps = malloc((size_t)reps * sizeof *gbps);
    if (!gbps) {
        fprintf(stderr, "fldispatch bench: out of memory\n");
        return NAN;
    }
    for (int r = 0; r < reps; r++) {
        ns = time_copies(d, n);
        if (isnan(ns)) {
            free(gbps);
            return NAN;
        }
        gbps[r] = 2.0 * (double)d->bytes * (double)n / ns;
    }
    double median = bench_median(gbps, reps);
    free(gbps);
    return median;
}
