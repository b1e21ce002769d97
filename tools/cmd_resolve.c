/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch resolve OP [--device D] [--dtype T] [--rows N] [--json]: which
 * implementation a call would use now, the fallback candidates in order,
 * every implementation selection dropped and why, and the token order used
 * with its source. The first text line is the selected impl_id alone (or
 * "none"), so scripts can take `| head -n 1`. --rows N resolves a call of N
 * rows, which picks the manifest's row bucket where it has them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "cli.h"
#include "json.h"
#include "options.h"
#include "suggest.h"

/* A printf format: its one conversion is the device list. */
static const char resolve_usage[] =
    "Usage: fldispatch resolve [--device D] [--dtype T] [--rows N] [--json] [--] OP\n"
    "\n"
    "Shows which implementation a call of OP would use now under the policy of\n"
    "the environment: first line the selected impl_id (or 'none'), then the\n"
    "candidates in order, the implementations dropped with the reason, and the\n"
    "token order used with its source.\n"
    "\n"
    "  --device D   %s\n"
    "  --dtype T    f32 (default), f16, bf16, any (default for attention_backend)\n"
    "  --rows N     a call of N rows (tokens): where the manifest splits the op into\n"
    "               row buckets, the bucket holding N decides (default: no bucket)\n"
    "  --json       one JSON object {\"schema\", \"op\", \"device\", \"dtype\",\n"
    "               \"rows\" (with --rows only), \"selected\" (null when none),\n"
    "               \"candidates\", \"rejected\":\n"
    "               [{\"impl_id\", \"reason\"}], \"order\" (tokens), \"order_source\",\n"
    "               \"policy_summary\"} (docs/schemas/resolve.schema.json)\n"
    "\n"
    "Exit status: 0 an implementation is selected, 2 usage or configuration error\n"
    "(an unknown op is named with the closest registered ones), 3 no\n"
    "implementation available.\n";

static void resolve_text(const fld_resolution *r, const char *device, const char *dtype,
                         int64_t rows, const char *policy)
{
    printf("%s\n", r->selected ? cli_text(r->selected) : "none");
    printf("op: %s  device: %s  dtype: %s", r->op ? cli_text(r->op) : "?", device, dtype);
    if (rows)
        printf("  rows: %" PRId64, rows);
    printf("\n");
    printf("order: %s (from %s)\n", r->order ? cli_text(r->order) : "-",
           r->order_source ? cli_text(r->order_source) : "-");
    printf("policy: %s\n", cli_text(policy));
    printf("candidates, in order:\n");
    if (r->n_candidates == 0)
        printf("  (none)\n");
    for (size_t i = 0; i < r->n_candidates; i++)
        printf("  %zu. %s\n", i + 1, cli_text(r->candidates[i]));
    printf("rejected:\n");
    if (r->n_rejected == 0)
        printf("  (none)\n");
    for (size_t i = 0; i < r->n_rejected; i++)
        printf("  %s: %s\n", cli_text(r->rejected[i].impl_id), cli_text(r->rejected[i].reason));
}

static void resolve_json(const fld_resolution *r, const char *op, const char *device,
                         const char *dtype, int64_t rows, const char *policy)
{
    struct json_writer w;
    json_begin_document(&w, stdout);
    json_key(&w, "op");
    json_string(&w, r->op ? r->op : op);
    json_key(&w, "device");
    json_string(&w, device);
    json_key(&w, "dtype");
    json_string(&w, dtype);
    if (rows) { /* only with --rows: without, the object is fld_explain()'s as before */
        json_key(&w, "rows");
        json_int(&w, rows);
    }
    json_key(&w, "selected");
    json_string(&w, r->selected);
    json_key(&w, "candidates");
    json_begin_array(&w);
    for (size_t i = 0; i < r->n_candidates; i++)
        json_string(&w, r->candidates[i]);
    json_end_array(&w);
    json_key(&w, "rejected");
    json_begin_array(&w);
    for (size_t i = 0; i < r->n_rejected; i++) {
        json_begin_object(&w);
        json_key(&w, "impl_id");
        json_string(&w, r->rejected[i].impl_id);
        json_key(&w, "reason");
        json_string(&w, r->rejected[i].reason);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "order");
    json_split(&w, r->order, "|");
    json_key(&w, "order_source");
    json_string(&w, r->order_source);
    json_key(&w, "policy_summary");
    json_string(&w, policy);
    json_end_object(&w);
    json_finish(&w);
}

/* What to print when fld_explain() gave no resolution at all. */
static int explain_failed(int rc, const char *op, const char *device, const char *dtype,
                          int64_t rows, const char *policy, bool json)
{
    const char *detail = *fld_last_error() ? fld_last_error() : fld_strerror(rc);
    if (rc == FLD_ENOTFOUND) {
        fprintf(stderr, "fldispatch resolve: no such op '%s' (%s)\n", cli_text(op), detail);
        return CLI_EXIT_USAGE;
    }
    if (rc != FLD_EUNAVAILABLE) {
        fprintf(stderr, "fldispatch resolve: %s\n", detail);
        return rc == FLD_ECONFIG ? CLI_EXIT_USAGE : CLI_EXIT_CHECK_FAILED;
    }
    fld_resolution empty = {.op = op};
    if (json)
        resolve_json(&empty, op, device, dtype, rows, policy);
    else
        printf("none\n%s\n", cli_text(detail));
    return CLI_EXIT_NONE;
}

int cmd_resolve(int argc, char **argv)
{
    enum { OPT_JSON, OPT_DEVICE, OPT_DTYPE, OPT_ROWS };
    static const struct cli_option options[] = {
        [OPT_JSON] = {"--json", false},
        [OPT_DEVICE] = {"--device", true},
        [OPT_DTYPE] = {"--dtype", true},
        [OPT_ROWS] = {"--rows", true},
        {NULL, false},
    };
    int64_t rows = 0;
    const char *op = NULL, *device_name = "cpu", *dtype_name = NULL;
    bool json = false;
    struct cli_args a;
    cli_args_init(&a, "resolve", options, argc, argv);
    const char *value;
    for (int k; (k = cli_args_next(&a, &value)) != CLI_ARG_END;) {
        switch (k) {
        case CLI_ARG_HELP:
            printf(resolve_usage, cli_device_list(CLI_DEVICES_DEFAULT));
            return CLI_EXIT_OK;
        case CLI_ARG_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_ARG_OPERAND:
            if (op)
                return cli_usage_error("resolve", "one OP at a time ('%s' and '%s')", op, value);
            op = value;
            break;
        case OPT_JSON:
            json = true;
            break;
        case OPT_DEVICE:
            device_name = value;
            break;
        case OPT_DTYPE:
            dtype_name = value;
            break;
        case OPT_ROWS: {
            char *end;
            errno = 0;
            long long n = strtoll(value, &end, 10);
            if (*value < '0' || *value > '9' || *end || errno || n < 1)
                return cli_usage_error("resolve",
                                       "invalid --rows '%s' (a row count from 1 to 2^63-1)", value);
            rows = n;
            break;
        }
        }
    }
    if (!op)
        return cli_usage_error("resolve", "missing OP (e.g. rms_norm)");

    int device;
    if (fld_device_from_name(device_name, &device) != FLD_OK)
        return cli_usage_error("resolve", "unknown device '%s' (%s)", device_name,
                               cli_device_list(CLI_DEVICES));
    /* attention_backend has no tensors, so it is registered for any dtype. */
    if (!dtype_name)
        dtype_name = strcmp(op, FLD_OP_ATTENTION_BACKEND) == 0 ? "any" : "f32";
    DLDataType dtype = FLD_DTYPE_ANY;
    if (strcmp(dtype_name, "any") != 0 && fld_dtype_from_name(dtype_name, &dtype) != FLD_OK)
        return cli_usage_error("resolve", "unknown dtype '%s' (f32, f16, bf16, any)", dtype_name);
    const char *canonical_dtype = fld_dtype_name(dtype);
    const char *canonical_device = fld_device_name(device);
    if (!canonical_dtype)
        canonical_dtype = dtype_name;
    if (!canonical_device)
        canonical_device = device_name;

    int rc = cli_init();
    if (rc != CLI_EXIT_OK)
        return rc;
    if (!fld_op_lookup(op)) {
        char hint[256];
        cli_did_you_mean_op(op, hint, sizeof hint);
        return cli_usage_error("resolve", "no such op '%s'%s", op,
                               *hint ? hint : " ('fldispatch list' shows the ops)");
    }

    char policy[1024];
    fld_policy_describe(policy, sizeof policy);

    fld_resolution *res = NULL;
    rc = fld__explain_rows(op, device, dtype, rows, &res);
    if (!res)
        return explain_failed(rc == FLD_OK ? FLD_EUNAVAILABLE : rc, op, canonical_device,
                              canonical_dtype, rows, policy, json);
    if (json)
        resolve_json(res, op, canonical_device, canonical_dtype, rows, policy);
    else
        resolve_text(res, canonical_device, canonical_dtype, rows, policy);
    int status = res->selected ? CLI_EXIT_OK : CLI_EXIT_NONE;
    fld_resolution_free(res);
    return status;
}
