/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Platform detection and the platform file search path (see platform.h).
 *
 * Steps, first decisive one wins:
 *   1. VLLM_FL_PLATFORM (cpu, cuda or nvidia, rocm, ascend, or one of
 *      vllm-plugin-FL's platforms without a device type here, see
 *      foreign_platforms[]), which the Python system only read when vLLM was
 *      missing; here it always wins.
 *   2. hwloc's PCI enumeration. Only the vendor and class of each function
 *      count: NVIDIA and AMD display (0x03xx) or processing-accelerator
 *      (0x12xx) functions, Huawei processing accelerators. Other functions of
 *      the same vendors (HD audio on a GPU board, NICs) say nothing about an
 *      accelerator.
 *   3. Plugin availability: a vendor implementation meant for exactly one
 *      accelerator device whose is_available() says yes.
 *   4. cpu.
 * When several accelerators are found the fixed order nvidia, rocm, ascend
 * decides, and detected_by says so, so that a mixed machine gets the same
 * answer on every run (never a PCI or plugin load order).
 */
#include <dlfcn.h>
#include <hwloc.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "fld_paths.h"

#include <fldispatch/fldispatch.h>

#include "devices.h"
#include "error.h"
#include "inflight.h"
#include "host.h"
#include "log.h"
#include "ops.h"
#include "parse.h"
#include "platform.h"
#include "reclaim.h"
#include "registry.h"

/*
 * The accelerators are the device table's rows with a vendor (devices.h), in
 * its order, which decides between several: arrays here are indexed by
 * FLD_DEV_* and the CPU's entry stays unused.
 */
static bool is_accelerator(int dev)
{
    return fld__devices[dev].vendor != NULL;
}

/* The copy fld_platform() reads without the lock. */
static _Atomic(struct fld_platform *) current;

/* ---- VLLM_FL_PLATFORM ----------------------------------------------------- */

/*
 * vllm-plugin-FL's platform names (its current_platform.vendor_name, each
 * with a config/<name>.yaml there) for accelerators that have no device type
 * here. Accepted so that a deployment's VLLM_FL_PLATFORM carries over: the
 * platform is named, <name>.yaml is looked up in the platform file path as
 * for any platform (none ships with fldispatch), and no device follows from
 * it.
 */
static const char *const foreign_platforms[] = {"metax", "iluvatar", "musa", "hygon",
                                                "gcu",   "ptg",      "sunrise", "thead"};
#define FOREIGN_PLATFORMS_TEXT "metax, iluvatar, musa, hygon, gcu, ptg, sunrise, thead"

/* 1 and the platform name for a valid value, 0 for a blank one, -1 otherwise. */
static int parse_platform(const char *value, const char **name)
{
    size_t n = strlen(value);
    const char *s = fld__trim(value, &n);
    if (n == 0)
        return 0;
    for (int i = 0; i < FLD_NDEVICES; i++) {
        const struct fld_device_desc *d = &fld__devices[i];
        if ((strlen(d->name) == n && strncasecmp(s, d->name, n) == 0) ||
            (d->alias && strlen(d->alias) == n && strncasecmp(s, d->alias, n) == 0)) {
            *name = d->platform;
            return 1;
        }
    }
    for (size_t i = 0; i < sizeof foreign_platforms / sizeof foreign_platforms[0]; i++) {
        if (strlen(foreign_platforms[i]) == n && strncasecmp(s, foreign_platforms[i], n) == 0) {
            *name = foreign_platforms[i];
            return 1;
        }
    }
    return -1;
}

/* ---- PCI enumeration ------------------------------------------------------ */

struct pci_found {
    unsigned count;
    unsigned vendor, device, class_id;
    char busid[32];
};

static int classify_pci(unsigned vendor, unsigned class_id)
{
    unsigned base = class_id >> 8;
    bool display = base == 0x03, accelerator = base == 0x12;
    switch (vendor) {
    case 0x10de:
        return display || accelerator ? FLD_DEV_CUDA : -1;
    case 0x1002:
        return display || accelerator ? FLD_DEV_ROCM : -1;
    case 0x19e5:
        /* Huawei also ships NICs and storage controllers; only its
         * processing accelerators are Ascend NPUs. */
        return accelerator ? FLD_DEV_ASCEND : -1;
    default:
        return -1;
    }
}

/*
 * Loads the topology with every PCI function kept (so the class check here,
 * not hwloc's notion of "important", decides) and no OS devices: the GPU
 * runtime components (cuda, nvml, rsmi, levelzero, opencl, gl) would
 * initialise vendor runtimes inside the host process, which is slow and
 * leaves driver state behind before a fork. Blacklisting a component this
 * hwloc does not know fails harmlessly.
 */
static int scan_pci(struct pci_found found[FLD_NDEVICES])
{
    /* "pci" (libpciaccess) too: the linux component lists the same PCI
     * devices from sysfs, and libpciaccess keeps its device table allocated
     * for the life of the process (a leak report under LeakSanitizer). */
    static const char *const skip[] = {"cuda", "nvml", "rsmi", "levelzero", "opencl", "gl", "pci"};
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) {
        fld__log(FLD_LOG_DEBUG, "platform: hwloc_topology_init failed; skipping PCI detection");
        return -1;
    }
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                            skip[i]);
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
    hwloc_topology_set_type_filter(topo, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_cache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_icache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    if (hwloc_topology_load(topo) != 0) {
        fld__log(FLD_LOG_DEBUG, "platform: hwloc_topology_load failed; skipping PCI detection");
        hwloc_topology_destroy(topo);
        return -1;
    }
    unsigned n_pci = 0;
    for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o; o = hwloc_get_next_pcidev(topo, o)) {
        const struct hwloc_pcidev_attr_s *a = &o->attr->pcidev;
        n_pci++;
        int acc = classify_pci(a->vendor_id, a->class_id);
        if (acc < 0)
            continue;
        struct pci_found *f = &found[acc];
        if (f->count++ == 0) {
            f->vendor = a->vendor_id;
            f->device = a->device_id;
            f->class_id = a->class_id;
            snprintf(f->busid, sizeof f->busid, "%04x:%02x:%02x.%01x", (unsigned)a->domain,
                     (unsigned)a->bus, (unsigned)a->dev, (unsigned)a->func);
        }
    }
    hwloc_topology_destroy(topo);
    fld__log(FLD_LOG_DEBUG, "platform: hwloc saw %u PCI functions", n_pci);
    return 0;
}

/* "; also rocm (2), ascend (1); nvidia chosen by the fixed order ..." when others were found. */
static void append_others(char *buf, size_t size, int chosen, const unsigned counts[FLD_NDEVICES])
{
    size_t len = strlen(buf);
    bool any = false;
    for (int i = 0; i < FLD_NDEVICES; i++) {
        if (i == chosen || !counts[i])
            continue;
        len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s %s (%u)",
                                any ? "," : "; also", fld__devices[i].platform, counts[i]);
        any = true;
    }
    if (any && len < size)
        snprintf(buf + len, size - len, "; %s chosen by the fixed order %s",
                 fld__devices[chosen].platform, fld__device_text(FLD_DEVICE_TEXT_ACCEL_PLATFORMS));
}

static bool detect_pci(struct fld_platform *out)
{
    struct pci_found found[FLD_NDEVICES];
    memset(found, 0, sizeof found);
    if (scan_pci(found) != 0)
        return false;
    unsigned counts[FLD_NDEVICES];
    int chosen = -1;
    for (int i = 0; i < FLD_NDEVICES; i++) {
        counts[i] = found[i].count;
        if (chosen < 0 && counts[i])
            chosen = i;
    }
    if (chosen < 0)
        return false;
    const struct pci_found *f = &found[chosen];
    snprintf(out->name, sizeof out->name, "%s", fld__devices[chosen].platform);
    int n = snprintf(out->detected_by, sizeof out->detected_by,
                     "PCI device %04x:%04x (class %04x) at %s", f->vendor, f->device, f->class_id,
                     f->busid);
    if (f->count > 1 && n > 0 && (size_t)n < sizeof out->detected_by)
        snprintf(out->detected_by + n, sizeof out->detected_by - (size_t)n,
                 " and %u more %s device%s", f->count - 1, fld__devices[chosen].vendor,
                 f->count > 2 ? "s" : "");
    append_others(out->detected_by, sizeof out->detected_by, chosen, counts);
    return true;
}

/* ---- plugin availability -------------------------------------------------- */

struct plugin_scan {
    struct fld_impl_rec *found[FLD_NDEVICES];
    unsigned counts[FLD_NDEVICES]; /* available implementations per accelerator */
};

/*
 * The accelerator an implementation is specific to, or -1. One that also
 * accepts CPU tensors, or several accelerators, is device-agnostic (an opaque
 * op that ignores the device, say) and says nothing about the machine.
 */
static int accel_of_mask(uint32_t devices)
{
    if (devices & FLD_DEVICE_MASK_CPU)
        return -1;
    int which = -1;
    for (int i = 0; i < FLD_NDEVICES; i++) {
        if (!is_accelerator(i) || !(devices & fld__devices[i].mask))
            continue;
        if (which >= 0)
            return -1;
        which = i;
    }
    return which;
}

static void scan_op(struct fld_op_s *op, void *user)
{
    struct plugin_scan *scan = user;
    for (size_t i = 0; i < op->n_impls; i++) {
        struct fld_impl_rec *impl = op->impls[i];
        if (impl->kind != FLD_KIND_VENDOR)
            continue;
        /* Only impls available without asking: an is_available() of a device
         * plugin would count devices, which initialises the driver, and a
         * process that forks after fld_init() must not inherit that. */
        int acc = accel_of_mask(impl->devices);
        if (acc < 0 || impl->is_available)
            continue;
        if (scan->counts[acc]++ == 0)
            scan->found[acc] = impl;
    }
}

static bool detect_plugins(struct fld_platform *out)
{
    struct plugin_scan scan;
    memset(&scan, 0, sizeof scan);
    fld__op_foreach(scan_op, &scan);
    int chosen = -1;
    for (int i = 0; i < FLD_NDEVICES && chosen < 0; i++)
        if (scan.counts[i])
            chosen = i;
    if (chosen < 0)
        return false;
    const struct fld_impl_rec *impl = scan.found[chosen];
    snprintf(out->name, sizeof out->name, "%s", fld__devices[chosen].platform);
    snprintf(out->detected_by, sizeof out->detected_by,
             "plugin '%s' has an available implementation for %s (%s of %s)",
             impl->plugin && impl->plugin->name ? impl->plugin->name : "?",
             fld__devices[chosen].name, impl->impl_id, impl->op ? impl->op->name : "?");
    append_others(out->detected_by, sizeof out->detected_by, chosen, scan.counts);
    return true;
}

/* ---- platform file search path -------------------------------------------- */

#define MAX_CONFIG_DIRS 2

static struct {
    char dirs[MAX_CONFIG_DIRS][PATH_MAX];
    size_t n;
    char joined[MAX_CONFIG_DIRS * PATH_MAX + MAX_CONFIG_DIRS];
} config_path;
static pthread_once_t config_path_once = PTHREAD_ONCE_INIT;

static void config_path_add(const char *dir)
{
    char real[PATH_MAX];
    const char *key = realpath(dir, real) ? real : dir;
    if (!*key || strlen(key) >= PATH_MAX || config_path.n == MAX_CONFIG_DIRS)
        return;
    for (size_t i = 0; i < config_path.n; i++)
        if (strcmp(config_path.dirs[i], key) == 0)
            return;
    strcpy(config_path.dirs[config_path.n++], key);
}

/* <prefix>/share/fldispatch/config for a library at <prefix>/lib/libfldispatch.so,
 * resolved through symlinks so that a build tree or a relocated install
 * finds its own files whatever the working directory. */
static void library_config_dir(char *out, size_t size)
{
    Dl_info info;
    char real[PATH_MAX];
    out[0] = '\0';
    if (!dladdr((void *)fld__platform_detect, &info) || !info.dli_fname ||
        !realpath(info.dli_fname, real))
        return;
    char *lib_dir = dirname(real);
    char *prefix = dirname(lib_dir);
    snprintf(out, size, "%s/share/fldispatch/config", strcmp(prefix, "/") == 0 ? "" : prefix);
}

static void compute_config_path(void)
{
    char dir[PATH_MAX];
    library_config_dir(dir, sizeof dir);
    if (dir[0])
        config_path_add(dir);
    config_path_add(FLD_INSTALL_CONFIG_DIR);
    size_t len = 0;
    for (size_t i = 0; i < config_path.n; i++)
        len += (size_t)snprintf(config_path.joined + len, sizeof config_path.joined - len, "%s%s",
                                i ? ":" : "", config_path.dirs[i]);
}

/* The platform file directories: <dir of libfldispatch.so>/../share/fldispatch/config,
 * then the compiled-in install directory; ':'-separated. */
static const char *platform_config_path(void)
{
    pthread_once(&config_path_once, compute_config_path);
    return config_path.joined;
}

static void find_config_file(struct fld_platform *out)
{
    pthread_once(&config_path_once, compute_config_path);
    out->config_file[0] = '\0';
    for (size_t i = 0; i < config_path.n; i++) {
        char path[PATH_MAX];
        struct stat st;
        int n = snprintf(path, sizeof path, "%s/%s.yaml", config_path.dirs[i], out->name);
        if (n < 0 || (size_t)n >= sizeof path)
            continue;
        /* Present but unreadable, or not a regular file (a directory, a
         * FIFO), is still "found": the config loader then reports it, rather
         * than a later directory silently taking over. */
        if (stat(path, &st) == 0) {
            snprintf(out->config_file, sizeof out->config_file, "%s", path);
            return;
        }
    }
}

/* ---- detection and the current platform ----------------------------------- */

int fld__platform_detect(struct fld_platform *out)
{
    memset(out, 0, sizeof *out);
    /* Not a path variable: plain getenv. Blank reads as unset, as for the
     * policy variables. */
    const char *env = getenv("VLLM_FL_PLATFORM");
    const char *name = NULL;
    int parsed = env ? parse_platform(env, &name) : 0;
    if (parsed < 0)
        return fld__fail(FLD_ECONFIG,
                         "VLLM_FL_PLATFORM: invalid value '%s' (valid: %s; or one of "
                         "vllm-plugin-FL's platforms without a device type here: "
                         FOREIGN_PLATFORMS_TEXT ")",
                         env, fld__device_text(FLD_DEVICE_TEXT_WORDS));
    if (parsed > 0) {
        snprintf(out->name, sizeof out->name, "%s", name);
        snprintf(out->detected_by, sizeof out->detected_by, "VLLM_FL_PLATFORM");
    } else if (!detect_pci(out) && !detect_plugins(out)) {
        snprintf(out->name, sizeof out->name, "cpu");
        snprintf(out->detected_by, sizeof out->detected_by, "no accelerator found (PCI, plugins)");
    }
    find_config_file(out);
    fld__log(FLD_LOG_DEBUG, "platform '%s' (%s); platform file: %s", out->name, out->detected_by,
             out->config_file[0] ? out->config_file : "none");
    return FLD_OK;
}

void fld__platform_set_current(const struct fld_platform *p)
{
    /* Reloads usually find the same platform: keep the copy in force rather
     * than retire one per reload (retired copies live until shutdown). */
    const struct fld_platform *now = atomic_load_explicit(&current, memory_order_acquire);
    if (now && strcmp(now->name, p->name) == 0 && strcmp(now->detected_by, p->detected_by) == 0 &&
        strcmp(now->config_file, p->config_file) == 0)
        return;
    struct fld_platform *copy = malloc(sizeof *copy);
    if (!copy) {
        /* The previous platform stays in force for fld_platform(); the
         * policy built from p is still correct. */
        fld__log(FLD_LOG_WARNING, "platform: out of memory recording platform '%s'", p->name);
        return;
    }
    *copy = *p;
    /* On the retire list from the start: readers take no lock, so no copy is
     * freed before fld_shutdown(), the current one included. */
    fld__retire_until_shutdown(copy, free);
    atomic_store_explicit(&current, copy, memory_order_release);
}

void fld__platform_shutdown(void)
{
    atomic_store_explicit(&current, NULL, memory_order_release);
}

int fld_platform(fld_platform_info *out)
{
    FLD_CALL_SCOPE();
    if (!out)
        return fld__fail(FLD_EINVAL, "fld_platform: argument 'out' is NULL");
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    const struct fld_platform *p = atomic_load_explicit(&current, memory_order_acquire);
    if (!p)
        return fld__fail(FLD_ESTATE, "fld_platform: no platform recorded");
    out->name = p->name;
    out->detected_by = p->detected_by;
    out->config_file = p->config_file;
    out->config_path = platform_config_path();
    return FLD_OK;
}
