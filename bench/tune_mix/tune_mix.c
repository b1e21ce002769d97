/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/tune_mix: one decode+prefill mix of rms_norm calls (float32, hidden
 * 4096) timed under each manifest named on the command line, in the same
 * process, the manifests alternated round by round (fld_reload() between
 * them), so that every figure comes from the same run. The mix: 96 decode
 * calls of 1 to 16 rows (cycling), then one prefill call of 512 rows and
 * one of 2048. Prints min and median milliseconds per mix for each manifest.
 *
 *   tune_mix ROUNDS MANIFEST...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fldispatch/fldispatch.h>

#define H        4096
#define MAX_ROWS 2048
#define MAX_MANIFESTS 8

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *x, *out, w[H];

static int call(int64_t rows)
{
    int64_t shape[2] = {rows, H}, wshape[1] = {H};
    DLDataType f32 = {kDLFloat, 32, 1};
    DLDevice cpu = {kDLCPU, 0};
    DLTensor tx = {x, cpu, 2, f32, shape, NULL, 0}, to = {out, cpu, 2, f32, shape, NULL, 0};
    DLTensor tw = {w, cpu, 1, f32, wshape, NULL, 0};
    return fld_rms_norm(&to, &tx, &tw, NULL, 1e-6f);
}

static int mix(void)
{
    int rc = 0;
    for (int i = 0; i < 96 && !rc; i++)
        rc = call(1 + i % 16);
    if (!rc)
        rc = call(512);
    if (!rc)
        rc = call(2048);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc - 2 > MAX_MANIFESTS) {
        fprintf(stderr, "usage: tune_mix ROUNDS MANIFEST... (at most %d)\n", MAX_MANIFESTS);
        return 2;
    }
    int rounds = atoi(argv[1]), n = argc - 2;
    if (rounds < 1 || rounds > 1000) {
        fprintf(stderr, "tune_mix: ROUNDS must be 1 to 1000\n");
        return 2;
    }
    x = malloc(sizeof(float) * MAX_ROWS * H);
    out = malloc(sizeof(float) * MAX_ROWS * H);
    double *t = malloc(sizeof(double) * (size_t)(rounds * n));
    if (!x || !out || !t)
        return 1;
    for (int64_t i = 0; i < (int64_t)MAX_ROWS * H; i++)
        x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < H; i++)
        w[i] = 1.0f + (float)(i % 13) / 64.0f;
    for (int r = 0; r < rounds; r++)
        for (int m = 0; m < n; m++) {
            setenv("VLLM_FL_MANIFEST", argv[2 + m], 1);
            if (fld_reload() != FLD_OK || mix() != FLD_OK) { /* the reload, then a warm-up mix */
                fprintf(stderr, "tune_mix: %s: %s\n", argv[2 + m], fld_last_error());
                return 1;
            }
            double t0 = now_ms();
            if (mix() != FLD_OK) {
                fprintf(stderr, "tune_mix: %s: %s\n", argv[2 + m], fld_last_error());
                return 1;
            }
            t[m * rounds + r] = now_ms() - t0;
        }
    printf("%-40s %10s %10s\n", "manifest", "min ms", "median ms");
    for (int m = 0; m < n; m++) {
        double *v = &t[m * rounds];
        qsort(v, (size_t)rounds, sizeof *v, cmp);
        printf("%-40s %10.3f %10.3f\n", argv[2 + m], v[0], v[rounds / 2]);
    }
    free(t);
    free(x);
    free(out);
    fld_shutdown();
    return 0;
}
