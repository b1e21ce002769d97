/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture of test_fork: a plugin that is slow where the host holds its lock
 * (register_builtins, is_available) and a kernel that runs as long as a test
 * wants, so a test can fork while another thread is inside each of them.
 * See slow_args in stress_fixture.h. Delays are set with
 * fld_slow_set_delays() after dlopen(RTLD_NOLOAD) or, for register_builtins,
 * from FLD_SLOW_REGISTER_MS read when the plugin is loaded.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include <fldispatch/plugin.h>

#include "stress_fixture.h"

#define EXPORT __attribute__((visibility("default")))

static _Atomic int register_ms, available_ms;
static _Atomic int in_register, in_available;
static _Atomic long available_calls;

EXPORT void fld_slow_set_delays(int reg_ms, int avail_ms);
EXPORT void fld_slow_set_delays(int reg_ms, int avail_ms)
{
    atomic_store(&register_ms, reg_ms);
    atomic_store(&available_ms, avail_ms);
}

/* 1 while register_builtins runs, 2 while is_available runs, else 0. */
EXPORT int fld_slow_phase(void);
EXPORT int fld_slow_phase(void)
{
    return atomic_load(&in_register) ? 1 : atomic_load(&in_available) ? 2 : 0;
}

EXPORT long fld_slow_available_calls(void);
EXPORT long fld_slow_available_calls(void)
{
    return atomic_load(&available_calls);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int slow_kernel(const void *args)
{
    slow_args *a = (slow_args *)args;
    if (a->entered)
        atomic_store(a->entered, 1);
    double until = now_ms() + a->spin_ms;
    if (a->release) {
        /* Bounded, so that a test that forgets to release cannot hang. */
        double limit = now_ms() + 20000.0;
        while (!atomic_load(a->release) && now_ms() < limit)
            sleep_ms(1);
    } else {
        while (now_ms() < until)
            ;
    }
    a->served++;
    return FLD_OK;
}

static bool slow_available(const char **reason)
{
    (void)reason;
    atomic_fetch_add(&available_calls, 1);
    int ms = atomic_load(&available_ms);
    if (ms > 0) {
        atomic_store(&in_available, 1);
        sleep_ms(ms);
        atomic_store(&in_available, 0);
    }
    return true;
}

static int register_builtins(fld_registry *reg)
{
    const char *env = getenv("FLD_SLOW_REGISTER_MS");
    if (env != NULL)
        atomic_store(&register_ms, atoi(env));
    int ms = atomic_load(&register_ms);
    if (ms > 0) {
        atomic_store(&in_register, 1);
        sleep_ms(ms);
        atomic_store(&in_register, 0);
    }
    const fld_impl op = {
        .op = "slow_op",
        .impl_id = "vendor.slow",
        .kind = FLD_KIND_VENDOR,
        .vendor = "slow",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = slow_kernel,
    };
    const fld_impl avail = {
        .op = "slow_avail_op",
        .impl_id = "vendor.slow",
        .kind = FLD_KIND_VENDOR,
        .vendor = "slow",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = slow_kernel,
        .is_available = slow_available,
    };
    int rc = fld_registry_register(reg, &op);
    if (rc == FLD_OK)
        rc = fld_registry_register(reg, &avail);
    return rc;
}

FLD_PLUGIN_DEFINE("slow", "1.0.0", register_builtins)
