/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: YAML policy files (VLLM_FL_CONFIG, the platform files,
 * fld_policy_load_file) and, on the same bytes, manifests (VLLM_FL_MANIFEST),
 * the other YAML file users write.
 *
 * The input is the file. The parsers open a path, so the bytes go into a
 * memfd reached through /proc/self/fd. Expected outcomes are FLD_OK or an
 * error with a message; on error the policy must be unchanged; a policy
 * that parsed must satisfy fuzz_policy.h's properties.
 */
#include "config.h"
#include "manifest.h"

#include "fuzz_policy.h"

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
    struct fuzz_policy_snapshot before, after;
    fuzz_snapshot(p, &before);
    fld__error_clear();
    int rc = fld__config_apply_file(p, path, "policy.yaml");
    if (rc == FLD_OK) {
        fuzz_check_policy(p);
        rc = fld__policy_check(p);
        FUZZ_CHECK(rc == FLD_OK || rc == FLD_ECONFIG, "fld__policy_check returned %d", rc);
    } else {
        FUZZ_CHECK(rc == FLD_ECONFIG || rc == FLD_ENOMEM, "fld__config_apply_file returned %d", rc);
        FUZZ_CHECK(fld_last_error()[0] != '\0', "error %d without a message", rc);
        fuzz_snapshot(p, &after);
        FUZZ_CHECK(fuzz_snapshot_equal(&before, &after),
                   "a failed policy file changed the policy: '%s' became '%s'", before.fingerprint,
                   after.fingerprint);
    }
    fld__policy_free(p);

    struct fld_manifest *m = NULL;
    fld__error_clear();
    rc = fld__manifest_load(path, &m);
    if (rc == FLD_OK) {
        FUZZ_CHECK(m != NULL, "manifest loaded as NULL");
        for (size_t i = 0; i < m->n; i++) {
            const struct fld_manifest_entry *e = &m->entries[i];
            FUZZ_CHECK(e->op && e->op[0] && e->impl_id && e->impl_id[0],
                       "manifest entry %zu incomplete", i);
            /* A bucket is found by both of its ends, an entry without rows by rows 0. */
            FUZZ_CHECK(fld__manifest_find(m, e->op, e->device, e->dtype, e->rows_lo) == e &&
                           (!e->rows_lo ||
                            fld__manifest_find(m, e->op, e->device, e->dtype, e->rows_hi) == e),
                       "manifest entry %zu (%s) not found by its own key", i, e->op);
        }
        fld__manifest_unref(m);
    } else {
        FUZZ_CHECK(m == NULL, "failed manifest load left a manifest");
        FUZZ_CHECK(rc == FLD_ECONFIG || rc == FLD_ENOMEM, "fld__manifest_load returned %d", rc);
        FUZZ_CHECK(fld_last_error()[0] != '\0', "error %d without a message", rc);
    }
    return 0;
}
