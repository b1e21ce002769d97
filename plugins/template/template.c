/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fld-template.so — a complete, minimal fldispatch plugin to copy.
 *
 * It registers one implementation, "vendor.template", of silu_and_mul on
 * CPU tensors of float32. It is off unless FLD_TEMPLATE_ENABLE=1 is set and
 * has a low priority, so loading it never changes what an application runs.
 *
 * To start your own backend:
 *   1. copy this file to plugins/<name>/ (in this tree: the Makefile builds
 *      every plugins/<name>/ directory into fld-<name>.so) or anywhere else;
 *   2. rename the plugin ("template"), the vendor and the impl_id;
 *   3. replace template_silu_and_mul() with your kernel and add a record per op.
 *
 * Out of tree, against an installed fldispatch:
 *
 *     cc -std=c11 -O2 -fPIC -shared -o fld-acme.so acme.c \
 *        $(pkg-config --cflags --libs fldispatch)
 *
 * then drop fld-acme.so into $(pkg-config --variable=plugindir fldispatch),
 * or point VLLM_FL_PLUGIN_DIR (a directory) or VLLM_FL_PLUGIN_MODULES (a file)
 * at it. Check the result with `fldispatch list` and `fldispatch resolve OP`.
 * The directory and file must not be writable by other users, or the host
 * skips them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* plugin.h brings in fldispatch.h (ops, argument structs) and half.h. */
#include <fldispatch/plugin.h>

/*
 * The kernel. The host calls it with a pointer to the op's argument struct,
 * here fld_activation_args {out, x}, after it has validated the tensors:
 * same dtype and device, matching shapes, last dimension contiguous, row
 * strides that collapse into one. So the kernel only has to check what its
 * own records did not already promise (device and dtype masks below).
 *
 * Rules every kernel follows:
 *   - Thread safety: the host calls kernels from any number of threads at
 *     once, without a lock. Keep no mutable global state; scratch lives on
 *     the stack or in memory the call allocates and frees.
 *   - Errors: return a negative FLD_E* status and explain it with
 *     fld_set_error(). On error the outputs must be untouched: the host may
 *     fall back to the next implementation on the same tensors, and for
 *     in-place ops (rotary_embedding, rms_norm with residual) a half-written
 *     output would corrupt its input. So check everything first, then write.
 *   - Declining: return FLD_EUNSUPPORTED (outputs untouched) to pass a call to
 *     the next candidate without it counting as a failure. Prefer the
 *     supports() predicate below when the decision needs no tensor data.
 */
static int template_silu_and_mul(const void *args)
{
    const fld_activation_args *a = args;
    fld_rows x, out;

    /* fld_tensor_rows() flattens a validated tensor into rows of width. */
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);

    const int64_t d = out.width;
    for (int64_t r = 0; r < out.rows; r++) {
        const float *xr = (const float *)x.data + r * x.stride;
        float *outr = (float *)out.data + r * out.stride;
        for (int64_t j = 0; j < d; j++) {
            float g = xr[j];
            outr[j] = g / (1.0f + expf(-g)) * xr[d + j];
        }
    }
    return FLD_OK;
}

/*
 * Optional per-call predicate. The host calls it before the kernel, on every
 * call, and passes the call to the next candidate when it returns false. It
 * must be cheap, MT safe and must not read tensor data. Typical uses: a
 * vector width, an alignment, a maximum size. This example declines rows
 * whose output width is not a multiple of 8 (a pretend 8-wide vector unit).
 */
static bool template_supports(const void *args)
{
    const fld_activation_args *a = args;
    const DLTensor *out = a->out;
    return out->ndim > 0 && out->shape[out->ndim - 1] % 8 == 0;
}

/*
 * Optional availability check: can this implementation run in this process
 * at all (driver loaded, device present, CPU feature found)? The host calls
 * it at most once per process (again in a forked child) and drops the
 * implementation when it returns false; `fldispatch list` shows *reason,
 * which must be a static string.
 */
static bool template_available(const char **reason)
{
    const char *v = getenv("FLD_TEMPLATE_ENABLE");
    if (v && strcmp(v, "1") == 0)
        return true;
    *reason = "set FLD_TEMPLATE_ENABLE=1 to enable the example";
    return false;
}

/*
 * Called once per process by the host, with its lock held, right after it
 * checked the descriptor's ABI. Do nothing here but describe implementations:
 * no application API calls (fld_call, fld_resolve, ...), no device work.
 *
 * Registration is all-or-nothing: if this function returns an error, or any
 * fld_registry_register() call failed, nothing this plugin registered is
 * kept and `fldispatch list` shows the plugin as rejected with the first
 * error. Returning the first failing status, as here, is the simplest way to
 * honour that.
 */
static int register_builtins(fld_registry *reg)
{
    const fld_impl silu = {
        /* The op name: a catalog op (FLD_OP_*) or a name of your own, whose
         * argument struct you then define and the host passes through. */
        .op = FLD_OP_SILU_AND_MUL,
        /* "<kind>.<name>": unique per op; policies name it as impl:ID. */
        .impl_id = "vendor.template",
        /* VENDOR is selected by the "vendor" and "vendor:template" tokens;
         * DEFAULT by "flagos"; REFERENCE by "reference". */
        .kind = FLD_KIND_VENDOR,
        /* Required for VENDOR; VLLM_FL_ALLOW_VENDORS / DENY_VENDORS match it. */
        .vendor = "template",
        /* Higher runs first among the impls one token matches. The usual
         * values are FLD_PRIORITY_VENDOR (100) and friends; 10 keeps this
         * example behind every real CPU implementation even when enabled. */
        .priority = 10,
        /* What the host may route here. It never calls the kernel with other
         * devices or dtypes, so the kernel above can assume float32 on CPU. */
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = template_silu_and_mul,
        .is_available = template_available,
        .supports = template_supports,
    };
    return fld_registry_register(reg, &silu);
}

/*
 * Exports the descriptor the host looks for (symbol fld_plugin_entry): ABI
 * version, plugin name ([a-z0-9_-], conventionally the <name> of
 * fld-<name>.so), the plugin's own version and the registration callback.
 * Use it exactly once per plugin. Built in this tree (FLD_IN_TREE defined) the
 * plugin is marked in-tree; built anywhere else it is out-of-tree, and
 * VLLM_FL_OOT_ENABLED / VLLM_FL_OOT_WHITELIST / VLLM_FL_OOT_BLACKLIST apply.
 */
FLD_PLUGIN_DEFINE("template", "1.0.0", register_builtins)
