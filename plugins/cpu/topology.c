/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where the cpu plugin's threads may run, computed once at registration:
 * per NUMA node, the physical cores and PUs this process may use, a map
 * from CPU number to node (a call finds its node with sched_getcpu()), and
 * the sizes of the last-level cache and of L2, from which the smallest
 * output written with non-temporal stores is chosen.
 *
 * hwloc's default (no HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) already drops
 * PUs the process's cgroup forbids; the thread's affinity mask (taskset,
 * sched_setaffinity) is applied on top here. Without hwloc the whole
 * machine is one node of the online CPUs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hwloc.h>

#include <fldispatch/plugin.h>

#include "runtime.h"

void fld__cpu_topology_free(struct fld_cpu_topology *t)
{
    for (int i = 0; i < t->n_nodes; i++)
        if (t->nodes[i].cpus)
            CPU_FREE(t->nodes[i].cpus);
    free(t->nodes);
    free(t->cpu_node);
    memset(t, 0, sizeof *t);
}

/* The calling thread's affinity mask, in a set grown until it fits; NULL on failure. */
static cpu_set_t *thread_affinity(int *ncpus)
{
    for (int n = 1024; n <= (1 << 20); n *= 2) {
        cpu_set_t *set = CPU_ALLOC((size_t)n);
        if (!set)
            return NULL;
        if (sched_getaffinity(0, CPU_ALLOC_SIZE((size_t)n), set) == 0) {
            *ncpus = n;
            return set;
        }
        CPU_FREE(set);
        if (errno != EINVAL)
            return NULL;
    }
    return NULL;
}

static int alloc_node_set(struct fld_cpu_node *node, int ncpus)
{
    node->cpus_size = CPU_ALLOC_SIZE((size_t)ncpus);
    node->cpus = CPU_ALLOC((size_t)ncpus);
    if (!node->cpus)
        return -1;
    CPU_ZERO_S(node->cpus_size, node->cpus);
    return 0;
}

/* One node with every CPU the thread may run on; note says why hwloc was not used. */
static int load_fallback(struct fld_cpu_topology *t, const char *why)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int ncpus = 0;
    cpu_set_t *aff = thread_affinity(&ncpus);
    int usable = aff ? CPU_COUNT_S(CPU_ALLOC_SIZE((size_t)ncpus), aff) : 0;
    int cores = online > 0 ? (int)online : 1;
    if (usable > 0 && usable < cores)
        cores = usable; /* taskset to fewer CPUs than are online */
    if (!aff) {
        ncpus = cores;
    }

    t->nodes = calloc(1, sizeof *t->nodes);
    t->cpu_node = malloc((size_t)ncpus * sizeof *t->cpu_node);
    if (!t->nodes || !t->cpu_node || alloc_node_set(&t->nodes[0], ncpus) < 0)
        goto nomem;
    t->n_nodes = 1;
    t->n_cpus = ncpus;
    t->nodes[0].os_index = 0;
    t->nodes[0].cores = cores;
    for (int c = 0; c < ncpus; c++) {
        t->cpu_node[c] = 0;
        if (!aff || CPU_ISSET_S((size_t)c, CPU_ALLOC_SIZE((size_t)ncpus), aff))
            CPU_SET_S((size_t)c, t->nodes[0].cpus_size, t->nodes[0].cpus);
    }
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
        llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    t->llc_bytes = llc > 0 ? (size_t)llc : 0;
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    t->l2_bytes = l2 > 0 ? (size_t)l2 : 0;
    snprintf(t->note, sizeof t->note, "%s; %ld online CPUs", why, online);
    if (aff)
        CPU_FREE(aff);
    return FLD_OK;

nomem:
    if (aff)
        CPU_FREE(aff);
    fld__cpu_topology_free(t);
    fld_set_error("vendor.cpu: out of memory reading the CPU topology");
    return FLD_ENOMEM;
}

int fld__cpu_threads_per_call(const struct fld_cpu_topology *t, int threads)
{
    int widest = threads;
    for (int i = 0; !threads && i < t->n_nodes; i++)
        if (t->nodes[i].cores > widest)
            widest = t->nodes[i].cores;
    return widest;
}

size_t fld__cpu_default_stream_bytes(const struct fld_cpu_topology *t, int threads, char *why,
                                     size_t size)
{
    why[0] = '\0';
    if (t->l2_bytes && fld__cpu_is_guest()) {
        size_t per_threads = t->l2_bytes * (size_t)(threads > 0 ? threads : 1);
        if (!t->llc_bytes || per_threads < t->llc_bytes) {
            snprintf(why, size, "virtual machine: L2 x %d thread%s", threads,
                     threads == 1 ? "" : "s");
            return per_threads;
        }
    }
    if (t->llc_bytes)
        return t->llc_bytes;
    snprintf(why, size, "cache size unknown");
    return (size_t)32 << 20;
}

size_t fld__cpu_default_norm_prefetch_bytes(const struct fld_cpu_topology *t)
{
    return t->llc_bytes ? t->llc_bytes / 4u : (size_t)8 << 20;
}

/* The size of the largest instance of one cache level, or 0. */
static size_t cache_size(hwloc_topology_t topo, hwloc_obj_type_t level)
{
    size_t best = 0;
    hwloc_obj_t c = NULL;
    while ((c = hwloc_get_next_obj_by_type(topo, level, c)) != NULL)
        if (c->attr && c->attr->cache.size > best)
            best = (size_t)c->attr->cache.size;
    return best;
}

/* The size of one instance of the deepest cache level present, or 0. */
static size_t last_level_cache(hwloc_topology_t topo)
{
    static const hwloc_obj_type_t levels[] = {HWLOC_OBJ_L5CACHE, HWLOC_OBJ_L4CACHE,
                                              HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L2CACHE,
                                              HWLOC_OBJ_L1CACHE};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        size_t size = cache_size(topo, levels[i]);
        if (size)
            return size;
    }
    return 0;
}

static int load_hwloc(struct fld_cpu_topology *t, hwloc_topology_t topo)
{
    int rc = FLD_ENOMEM, aff_ncpus = 0;
    hwloc_bitmap_t usable = NULL, taken = NULL, node_cpus = NULL;
    cpu_set_t *aff = thread_affinity(&aff_ncpus);

    usable = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo));
    taken = hwloc_bitmap_alloc();
    node_cpus = hwloc_bitmap_alloc();
    if (!usable || !taken || !node_cpus)
        goto fail;
    if (aff) {
        hwloc_bitmap_t bound = hwloc_bitmap_alloc();
        if (!bound)
            goto fail;
        for (int c = 0; c < aff_ncpus; c++)
            if (CPU_ISSET_S((size_t)c, CPU_ALLOC_SIZE((size_t)aff_ncpus), aff))
                hwloc_bitmap_set(bound, (unsigned)c);
        /* An affinity outside what hwloc saw (a foreign XML topology) is ignored. */
        if (hwloc_bitmap_intersects(usable, bound))
            hwloc_bitmap_and(usable, usable, bound);
        hwloc_bitmap_free(bound);
    }

    int last = hwloc_bitmap_last(hwloc_topology_get_complete_cpuset(topo));
    int n_numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    if (last < 0 || n_numa <= 0) {
        rc = -1;
        goto fail;
    }
    t->n_cpus = last + 1;
    t->cpu_node = malloc((size_t)t->n_cpus * sizeof *t->cpu_node);
    t->nodes = calloc((size_t)n_numa, sizeof *t->nodes);
    if (!t->cpu_node || !t->nodes)
        goto fail;
    for (int c = 0; c < t->n_cpus; c++)
        t->cpu_node[c] = -1;

    bool have_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0;
    for (int i = 0; i < n_numa; i++) {
        hwloc_obj_t numa = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        if (!numa || !numa->cpuset)
            continue;
        /* Nodes may share PUs (a package's DRAM and HBM): each PU goes to the first. */
        hwloc_bitmap_andnot(node_cpus, numa->cpuset, taken);
        hwloc_bitmap_or(taken, taken, node_cpus);
        hwloc_bitmap_and(node_cpus, node_cpus, usable);
        if (hwloc_bitmap_iszero(node_cpus))
            continue; /* memory only, or nothing we may run on */

        struct fld_cpu_node *node = &t->nodes[t->n_nodes];
        if (alloc_node_set(node, t->n_cpus) < 0)
            goto fail;
        node->os_index = (int)numa->os_index;
        hwloc_obj_t o = NULL;
        hwloc_obj_type_t unit = have_cores ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
        while ((o = hwloc_get_next_obj_by_type(topo, unit, o)) != NULL)
            if (hwloc_bitmap_intersects(o->cpuset, node_cpus))
                node->cores++;
        unsigned c;
        hwloc_bitmap_foreach_begin(c, numa->cpuset)
        {
            if ((int)c < t->n_cpus && t->cpu_node[c] < 0)
                t->cpu_node[c] = t->n_nodes;
            if ((int)c < t->n_cpus && hwloc_bitmap_isset(node_cpus, c))
                CPU_SET_S(c, node->cpus_size, node->cpus);
        }
        hwloc_bitmap_foreach_end();
        if (node->cores < 1)
            node->cores = 1;
        t->n_nodes++;
    }
    if (t->n_nodes == 0) {
        rc = -1;
        goto fail;
    }
    t->llc_bytes = last_level_cache(topo);
    t->l2_bytes = cache_size(topo, HWLOC_OBJ_L2CACHE);
    rc = FLD_OK;

fail:
    if (rc != FLD_OK)
        fld__cpu_topology_free(t);
    hwloc_bitmap_free(usable);
    hwloc_bitmap_free(taken);
    hwloc_bitmap_free(node_cpus);
    if (aff)
        CPU_FREE(aff);
    return rc;
}

int fld__cpu_topology_load(struct fld_cpu_topology *t)
{
    memset(t, 0, sizeof *t);
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) < 0)
        return load_fallback(t, "hwloc_topology_init failed");

    /* Only CPUs and caches matter: skipping PCI and friends keeps this fast. */
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_icache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    unsigned long flags = 0;
#if HWLOC_API_VERSION >= 0x00020100
    flags |= HWLOC_TOPOLOGY_FLAG_DONT_CHANGE_BINDING; /* never rebind the caller's thread */
#endif
#if HWLOC_API_VERSION >= 0x00020800
    flags |= HWLOC_TOPOLOGY_FLAG_NO_DISTANCES | HWLOC_TOPOLOGY_FLAG_NO_MEMATTRS |
             HWLOC_TOPOLOGY_FLAG_NO_CPUKINDS;
#endif
    hwloc_topology_set_flags(topo, flags);

    int rc;
    if (hwloc_topology_load(topo) < 0) {
        /* errno is not meaningful here: hwloc sets it on paths it recovers from. */
        hwloc_topology_destroy(topo);
        return load_fallback(t, "hwloc could not load the topology");
    }
    rc = load_hwloc(t, topo);
    hwloc_topology_destroy(topo);
    if (rc == -1)
        return load_fallback(t, "hwloc found no NUMA node with usable CPUs");
    if (rc != FLD_OK)
        fld_set_error("vendor.cpu: out of memory reading the CPU topology");
    return rc;
}
