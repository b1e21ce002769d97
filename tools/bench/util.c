/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the bench files (util.h): the clock, the CPU's
 * name, medians and CPU affinity. They depend on nothing else of the tool,
 * so every bench file can use them without reaching into cmd_bench.c.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

double bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

bool bench_proc_field(const char *path, const char *key, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    const size_t key_len = strlen(key);
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, key_len) != 0)
            continue;
        const char *p = line + key_len;
        p += strspn(p, " \t");
        if (*p != ':')
            continue;
        p += 1 + strspn(p + 1, " \t");
        snprintf(buf, size, "%.*s", (int)strcspn(p, "\r\n"), p);
        found = true;
    }
    fclose(f);
    return found;
}

void bench_cpu_model(char *buf, size_t size)
{
    if (!bench_proc_field("/proc/cpuinfo", "model name", buf, size))
        snprintf(buf, size, "unknown");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    if (n < 1)
        return NAN;
    for (int i = 0; i < n; i++)
        if (isnan(v[i]))
            return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

int bench_allowed_cpus(void)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return 1;
    int n = CPU_COUNT(&allowed);
    return n > 0 ? n : 1;
}

void bench_pin_thread(unsigned long thread, int index)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return;
    int count = CPU_COUNT(&allowed);
    if (count < 1)
        return;
    int want = index % count;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || want-- > 0)
            continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_setaffinity_np((pthread_t)thread, sizeof one, &one);
        return;
    }
}
