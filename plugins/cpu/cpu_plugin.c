/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cpu plugin: registers vendor.cpu for every compute op of the catalog,
 * on CPU, in float32, float16 and bfloat16. attention_backend is left to the
 * library's reference (it has no kernel to speed up).
 *
 * Registration also sets up the runtime, from the environment as it is at
 * that moment (a change takes effect after fld_shutdown() + fld_init(),
 * which unloads and reloads this object):
 *   VLLM_FL_CPU_ISA              cap on the variant (isa.c)
 *   VLLM_FL_CPU_THREADS          threads per parallel call, 1..1024
 *                                (default: physical cores of the caller's NUMA node)
 *   VLLM_FL_CPU_PARALLEL_MIN_KB  smallest call (KiB read + written) that runs
 *                                in parallel, 0..1048576 (default: pool.c)
 *   VLLM_FL_CPU_STREAM_MIN_KB    smallest output (KiB) written with
 *                                non-temporal stores, 0..2^30 (default:
 *                                fld__cpu_default_stream_bytes())
 *   VLLM_FL_CPU_ACTIVATIONS      reference (default): silu and gelu as the
 *                                library's reference (vLLM's CUDA formulas);
 *                                torch: as PyTorch's CPU kernels, to the bit
 *                                (vmath.h), what vLLM runs on CPU; the vLLM
 *                                plugin sets it when unset
 *   VLLM_FL_CPU_LOOKUP           gather or scalar: how the avx2 variant reads
 *                                the 16-bit activation tables (default:
 *                                scalar on AMD, gather elsewhere)
 *   VLLM_FL_CPU_ACT16            table or compute: whether the avx2 variant
 *                                looks every 16-bit activation up or
 *                                computes it in float32 and looks up only
 *                                what that cannot round for certain
 *                                (default: table; measured faster on Zen 3)
 * An invalid value rejects the plugin with a reason naming the variable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "runtime.h"

#define THREADS_MAX         1024
#define PARALLEL_MIN_KB_MAX 1048576L
#define STREAM_MIN_KB_MAX   (1L << 30)

const struct fld_cpu_variant *fld__cpu_active = &fld__cpu_variant_portable;
bool fld__cpu_rotary_prefetch = true;
size_t fld__cpu_norm_prefetch_bytes = 0;
bool fld__cpu_lookup_scalar = false;
bool fld__cpu_act16_compute = false;
bool fld__cpu_torch_activations = false;

/* In the order of fld__cpu_isa_names (isa.c). */
static const struct fld_cpu_variant *const variants[] = {
#if defined(__x86_64__)
    &fld__cpu_variant_avx512_bf16,
    &fld__cpu_variant_avx512,
    &fld__cpu_variant_avx2,
#elif defined(__aarch64__)
    &fld__cpu_variant_neon,
#endif
    &fld__cpu_variant_portable,
};

__attribute__((cold, noinline)) int fld__cpu_dtype_unknown(const char *op, const char *tensor)
{
    fld_set_error("%s: tensor '%s' has a dtype vendor.cpu does not handle", op, tensor);
    return -1;
}

static const struct {
    const char *op;
    fld_kernel_fn fn;
} cpu_kernels[] = {
#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN) {FLD_OP_##ID, fld__cpu_##name},
#include "activations.def"
    {FLD_OP_RMS_NORM, fld__cpu_rms_norm},
    {FLD_OP_GEMMA_RMS_NORM, fld__cpu_gemma_rms_norm},
    {FLD_OP_ROTARY_EMBEDDING, fld__cpu_rotary_embedding},
    {FLD_OP_ROTARY_EMBEDDING_OUT, fld__cpu_rotary_embedding_out},
};

/*
 * A whole number in [min, max] from variable name: FLD_OK with *value set,
 * FLD_OK with *value untouched when unset, FLD_ECONFIG when invalid (only
 * decimal digits are accepted: no sign, no spaces, no suffix).
 */
static int int_from_env(const char *name, long min, long max, long *value)
{
    const char *s = getenv(name);
    if (!s)
        return FLD_OK;
    long v = 0;
    bool ok = s[0] != '\0';
    for (const char *c = s; ok && *c; c++) {
        if (*c < '0' || *c > '9' || v > max)
            ok = false;
        else
            v = v * 10 + (*c - '0');
    }
    if (!ok || v < min || v > max) {
        fld_set_error("%s='%s' is not a whole number from %ld to %ld", name, s, min, max);
        return FLD_ECONFIG;
    }
    *value = v;
    return FLD_OK;
}

/* "35.8 MiB", "32 MiB", "512 KiB". */
static void format_size(char *buf, size_t size, size_t bytes)
{
    if (bytes >= 1024 * 1024 && bytes % (1024 * 1024) == 0)
        snprintf(buf, size, "%zu MiB", bytes >> 20);
    else if (bytes >= 1024 * 1024)
        snprintf(buf, size, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
    else
        snprintf(buf, size, "%zu KiB", bytes >> 10);
}

/* "2 threads (2 cores in NUMA node 0)" and the like; threads 0 = per node. */
static void describe_threads(char *buf, size_t size, const struct fld_cpu_topology *t, long threads,
                             const char *env_threads)
{
    char why[224] = "";
    int lo = (int)threads, hi = (int)threads;
    if (threads) {
        snprintf(why, sizeof why, "VLLM_FL_CPU_THREADS=%s", env_threads);
    } else {
        lo = hi = t->nodes[0].cores;
        for (int i = 1; i < t->n_nodes; i++) {
            lo = t->nodes[i].cores < lo ? t->nodes[i].cores : lo;
            hi = t->nodes[i].cores > hi ? t->nodes[i].cores : hi;
        }
        if (t->note[0]) {
            /* the note says where the count comes from */
        } else if (t->n_nodes == 1) {
            snprintf(why, sizeof why, "%d core%s in NUMA node %d", lo, lo == 1 ? "" : "s",
                     t->nodes[0].os_index);
        } else if (lo == hi) {
            int len = snprintf(why, sizeof why, "%d core%s in each of NUMA nodes", lo,
                               lo == 1 ? "" : "s");
            for (int i = 0; i < t->n_nodes && len > 0 && (size_t)len < sizeof why; i++)
                len += snprintf(why + len, sizeof why - (size_t)len, "%s %d", i ? "," : "",
                                t->nodes[i].os_index);
        } else {
            int len = snprintf(why, sizeof why, "%s", "cores of the caller's NUMA node:");
            for (int i = 0; i < t->n_nodes && len > 0 && (size_t)len < sizeof why; i++)
                len += snprintf(why + len, sizeof why - (size_t)len, "%s node %d %d", i ? "," : "",
                                t->nodes[i].os_index, t->nodes[i].cores);
        }
    }
    char count[32];
    if (lo == hi)
        snprintf(count, sizeof count, "%d thread%s", lo, lo == 1 ? "" : "s");
    else
        snprintf(count, sizeof count, "%d-%d threads", lo, hi);
    snprintf(buf, size, "%s (%s%s%s)", count, why, why[0] && t->note[0] ? "; " : "", t->note);
}

static int register_builtins(fld_registry *reg)
{
    /* The environment first: a bad value rejects the plugin before anything runs. */
    long threads = 0, min_kb = -1, stream_kb = -1;
    int rc = int_from_env("VLLM_FL_CPU_THREADS", 1, THREADS_MAX, &threads);
    if (rc == FLD_OK)
        rc = int_from_env("VLLM_FL_CPU_PARALLEL_MIN_KB", 0, PARALLEL_MIN_KB_MAX, &min_kb);
    if (rc == FLD_OK)
        rc = int_from_env("VLLM_FL_CPU_STREAM_MIN_KB", 0, STREAM_MIN_KB_MAX, &stream_kb);
    if (rc != FLD_OK)
        return rc;
    bool torch_activations = false;
    const char *act_env = getenv("VLLM_FL_CPU_ACTIVATIONS");
    if (act_env && strcmp(act_env, "torch") == 0) {
        torch_activations = true;
    } else if (act_env && strcmp(act_env, "reference") != 0) {
        fld_set_error("VLLM_FL_CPU_ACTIVATIONS='%s' is not an activation form (valid: reference, "
                      "torch)",
                      act_env);
        return FLD_ECONFIG;
    }

    const char *lookup_env = getenv("VLLM_FL_CPU_LOOKUP");
    bool lookup_scalar = fld__cpu_is_amd();
    if (lookup_env && strcmp(lookup_env, "scalar") == 0) {
        lookup_scalar = true;
    } else if (lookup_env && strcmp(lookup_env, "gather") == 0) {
        lookup_scalar = false;
    } else if (lookup_env) {
        fld_set_error("VLLM_FL_CPU_LOOKUP='%s' is not a table lookup (valid: gather, scalar)",
                      lookup_env);
        return FLD_ECONFIG;
    }

    const char *act16_env = getenv("VLLM_FL_CPU_ACT16");
    bool act16_compute = false;
    if (act16_env && strcmp(act16_env, "compute") == 0) {
        act16_compute = true;
    } else if (act16_env && strcmp(act16_env, "table") == 0) {
        act16_compute = false;
    } else if (act16_env) {
        fld_set_error("VLLM_FL_CPU_ACT16='%s' is not a way to get the 16-bit activations (valid: "
                      "table, compute)",
                      act16_env);
        return FLD_ECONFIG;
    }

    char isa_why[256];
    int isa = fld__cpu_isa_choose(fld__cpu_detect_features(), getenv("VLLM_FL_CPU_ISA"), isa_why,
                                  sizeof isa_why);
    if (isa < 0) {
        fld_set_error("%s", isa_why);
        return FLD_ECONFIG;
    }
    _Static_assert(sizeof variants / sizeof variants[0] > 0, "at least the portable variant");
    if (isa >= (int)(sizeof variants / sizeof variants[0]) ||
        strcmp(variants[isa]->name, fld__cpu_isa_names[isa]) != 0) {
        fld_set_error("vendor.cpu: variant table out of order at '%s'", fld__cpu_isa_names[isa]);
        return FLD_EPLUGIN;
    }

    struct fld_cpu_topology topo;
    rc = fld__cpu_topology_load(&topo);
    if (rc != FLD_OK)
        return rc;
    char threads_text[320];
    describe_threads(threads_text, sizeof threads_text, &topo, threads,
                     getenv("VLLM_FL_CPU_THREADS"));
    size_t min_bytes = min_kb >= 0 ? (size_t)min_kb * 1024u : fld__cpu_default_parallel_min_bytes();
    char stream_why[160];
    size_t stream_bytes;
    if (stream_kb >= 0) {
        stream_bytes = (size_t)stream_kb * 1024u;
        snprintf(stream_why, sizeof stream_why, "VLLM_FL_CPU_STREAM_MIN_KB=%ld", stream_kb);
    } else {
        stream_bytes = fld__cpu_default_stream_bytes(
            &topo, fld__cpu_threads_per_call(&topo, (int)threads), stream_why, sizeof stream_why);
    }
    const size_t norm_prefetch_bytes = fld__cpu_default_norm_prefetch_bytes(&topo);
    fld__cpu_pool_configure(&topo, (int)threads, min_bytes, stream_bytes);
    fld__cpu_norm_prefetch_bytes = norm_prefetch_bytes;
    fld__cpu_active = variants[isa];
    fld__cpu_rotary_prefetch = !fld__cpu_is_amd();
    fld__cpu_lookup_scalar = lookup_scalar;
    fld__cpu_act16_compute = act16_compute;
    fld__cpu_torch_activations = torch_activations;

    for (size_t i = 0; i < sizeof cpu_kernels / sizeof cpu_kernels[0]; i++) {
        const fld_impl impl = {
            .op = cpu_kernels[i].op,
            .impl_id = "vendor.cpu",
            .kind = FLD_KIND_VENDOR,
            .vendor = "cpu",
            .priority = FLD_PRIORITY_VENDOR,
            .devices = FLD_DEVICE_MASK_CPU,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = cpu_kernels[i].fn,
        };
        rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }

    const bool avx2 = strcmp(variants[isa]->name, "avx2") == 0;
    char stream[48], prefetch[48];
    format_size(stream, sizeof stream, fld__cpu_stream_threshold());
    format_size(prefetch, sizeof prefetch, norm_prefetch_bytes);
    return fld_registry_set_detail(
        reg,
        "isa %s%s%s%s; %s; parallel from %zu KiB; non-temporal stores "
        "from %s%s%s%s; norms prefetch rows above %s%s%s%s",
        variants[isa]->name, isa_why[0] ? " (" : "", isa_why, isa_why[0] ? ")" : "", threads_text,
        min_bytes / 1024, stream, stream_why[0] ? " (" : "", stream_why, stream_why[0] ? ")" : "",
        prefetch, torch_activations ? "; activations as torch's" : "",
        avx2 && act16_compute ? "; 16-bit activations computed in float32" : "",
        avx2 && lookup_scalar ? "; 16-bit tables read with scalar loads" : "");
}

FLD_PLUGIN_DEFINE("cpu", FLD_VERSION_STRING, register_builtins)
