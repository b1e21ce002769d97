/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the VLLM_FL_OP_CONFIG file, a JSON object of op names
 * to token orders ({"rms_norm": "vendor|reference"}), parsed by
 * fld__op_config_apply() onto a policy that already has per-op orders (which
 * a non-empty file replaces as a whole, as vllm-plugin-FL does).
 *
 * The input is the file (a memfd reached through /proc/self/fd). On error
 * the policy must be unchanged; on success the policy holds the file's orders
 * alone (or, for an empty object, the earlier ones unchanged) and
 * fuzz_policy.h's properties hold.
 */
#include "fuzz_policy.h"

static const char base_per_op[] = "rms_norm=reference;silu_and_mul=vendor|flagos";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup_environment();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file_with(data, size);
    struct fld_policy *p = fld__policy_new_default();
    FUZZ_CHECK(p != NULL, "out of memory");
    FUZZ_CHECK(fld__policy_set_field(p, "per_op", base_per_op, "VLLM_FL_PER_OP") == FLD_OK,
               "base per_op");
    size_t base_n = p->per_op.n;
    struct fuzz_policy_snapshot before, after;
    fuzz_snapshot(p, &before);

    fld__error_clear();
    int rc = fld__op_config_apply(p, path);
    if (rc == FLD_OK) {
        fuzz_check_policy(p);
        bool replaced = strcmp(p->source[FLD_PF_PER_OP], "VLLM_FL_OP_CONFIG") == 0;
        FUZZ_CHECK(replaced || p->per_op.n == base_n, "orders lost: %zu before, %zu after", base_n,
                   p->per_op.n);
        for (size_t i = 0; i < p->per_op.n; i++) {
            const struct fld_order *o = &p->per_op.items[i];
            FUZZ_CHECK(o->source[0] != '\0', "order of '%s' has no source", o->op);
            FUZZ_CHECK(!replaced || strncmp(o->source, "VLLM_FL_OP_CONFIG (", 19) == 0,
                       "order of '%s' kept from %s although the file replaces the orders", o->op,
                       o->source);
        }
    } else {
        FUZZ_CHECK(rc == FLD_ECONFIG || rc == FLD_ENOMEM, "fld__op_config_apply returned %d", rc);
        FUZZ_CHECK(strstr(fld_last_error(), "VLLM_FL_OP_CONFIG") != NULL,
                   "error %d does not name VLLM_FL_OP_CONFIG", rc);
        fuzz_snapshot(p, &after);
        FUZZ_CHECK(fuzz_snapshot_equal(&before, &after),
                   "a failed VLLM_FL_OP_CONFIG changed the policy: '%s' became '%s'",
                   before.fingerprint, after.fingerprint);
    }
    fld__policy_free(p);
    return 0;
}
