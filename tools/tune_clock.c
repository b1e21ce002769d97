/* SPDX-License-Identifier: Apache-2.0 */
/* The clock of fldispatch tune and its test hook (tune_clock.h). */
#include "tune_clock.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/util.h"
#include "tensors.h"

#define SIM_MAX_IMPLS 16

static struct {
    bool on, load;
    uint64_t state;
    int n;
    struct {
        char impl[128];
        double ns;
        bool threaded;
    } costs[SIM_MAX_IMPLS];
} sim;

static bool bad(char *err, unsigned long size, const char *text, const char *what)
{
    snprintf(err, size, "%s='%s': %s (expected SEED:quiet|load:IMPL=NS[*],...)", TUNE_CLOCK_ENV,
             text, what);
    return false;
}

bool tune_clock_init(char *err, unsigned long size)
{
    memset(&sim, 0, sizeof sim);
    const char *text = getenv(TUNE_CLOCK_ENV);
    if (!text || !*text)
        return true;
    char *end;
    errno = 0;
    unsigned long long seed = strtoull(text, &end, 10);
    if (errno || end == text || *end != ':')
        return bad(err, size, text, "bad seed");
    const char *p = end + 1;
    if (strncmp(p, "quiet:", 6) == 0)
        p += 6;
    else if (strncmp(p, "load:", 5) == 0) {
        sim.load = true;
        p += 5;
    } else
        return bad(err, size, text, "noise must be 'quiet' or 'load'");
    while (*p) {
        if (sim.n == SIM_MAX_IMPLS)
            return bad(err, size, text, "too many implementations");
        const char *eq = strchr(p, '=');
        size_t len = eq ? (size_t)(eq - p) : 0;
        if (!len || len >= sizeof sim.costs[0].impl)
            return bad(err, size, text, "expected IMPL=NS");
        memcpy(sim.costs[sim.n].impl, p, len);
        sim.costs[sim.n].impl[len] = '\0';
        errno = 0;
        double ns = strtod(eq + 1, &end);
        if (errno || end == eq + 1 || !(ns > 0))
            return bad(err, size, text, "a cost must be a positive number of nanoseconds");
        sim.costs[sim.n].ns = ns;
        if (*end == '*') {
            sim.costs[sim.n].threaded = true;
            end++;
        }
        sim.n++;
        if (*end == ',')
            end++;
        else if (*end)
            return bad(err, size, text, "expected ',' between costs");
        p = end;
    }
    sim.state = seed;
    sim.on = true;
    return true;
}

double tune_clock_now(void)
{
    return bench_now_ns();
}

static long involuntary_switches(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_nivcsw : -1;
}

void tune_clock_start(struct tune_mark *m)
{
    m->switches = sim.on ? 0 : involuntary_switches();
    m->ns = bench_now_ns();
}

/* The simulated time per call of impl: its cost times a noise factor; *clean as the header says. */
static double simulated(const char *impl, bool *clean)
{
    double ns = 1000;
    bool threaded = false;
    for (int i = 0; i < sim.n; i++)
        if (strcmp(sim.costs[i].impl, impl) == 0) {
            ns = sim.costs[i].ns;
            threaded = sim.costs[i].threaded;
        }
    double u = tool_rng_unit(&sim.state), v = tool_rng_unit(&sim.state),
           w = tool_rng_unit(&sim.state);
    double factor = 1 + 0.02 * v;
    *clean = true;
    if (sim.load && u < 0.7) {
        factor = 1 + (threaded ? 29 : 2) * v;
        *clean = w >= 0.5;
    }
    return ns * factor;
}

double tune_clock_stop(const struct tune_mark *m, const char *impl, long calls, bool *clean)
{
    double real_ns = bench_now_ns() - m->ns;
    if (!sim.on) {
        long now = involuntary_switches();
        *clean = now >= 0 && now == m->switches;
        return real_ns / (double)calls;
    }
    return simulated(impl, clean);
}

double tune_clock_device(double device_ns, const char *impl, long calls)
{
    bool clean;
    return sim.on ? simulated(impl, &clean) : device_ns / (double)calls;
}
