/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fld_explain() and fld_resolve(): a call's key from the caller's device
 * type and dtype, the op by name, and selection's account of the choice
 * (select.c fld__select_explain()).
 */
#include <stdio.h>

#include <fldispatch/internal/tool_api.h>

#include "chain.h"
#include "devices.h"
#include "dtypes.h"
#include "error.h"
#include "host.h"
#include "inflight.h"
#include "names.h"

/* Out of line: fld__key_from() runs on fld_call_on()'s path. */
static __attribute__((cold, noinline)) int unknown_device_type(int device_type)
{
    return fld__fail(FLD_EINVAL, "unknown device type %d (valid: %s)", device_type,
                     fld__device_text(FLD_DEVICE_TEXT_CODES));
}

int fld__key_from(int device_type, DLDataType dtype, int *dev, int *dt)
{
    *dev = fld__device_index(device_type);
    if (*dev < 0)
        return unknown_device_type(device_type);
    if (dtype.code == 0 && dtype.bits == 0 && dtype.lanes == 0) {
        *dt = FLD_DT_ANY;
        return FLD_OK;
    }
    *dt = fld__dtype_index(dtype);
    if (*dt < 0)
        return fld__fail(FLD_EINVAL,
                         "unsupported dtype (code %d, bits %d, lanes %d; valid: f32, "
                         "f16, bf16)",
                         dtype.code, dtype.bits, dtype.lanes);
    return FLD_OK;
}

/* FLD_ENOTFOUND for an op name nothing registered, with the closest names. */
int fld__unknown_op(const char *name)
{
    char hint[256];
    fld__lock();
    fld__did_you_mean_op(name, hint, sizeof hint);
    fld__unlock();
    return fld__fail(FLD_ENOTFOUND,
                     "no op named '%s' (not in the catalog and no plugin registered it)%s", name,
                     hint);
}

int fld__explain_rows(const char *name, int device_type, DLDataType dtype, int64_t rows,
                      fld_resolution **out)
{
    *out = NULL;
    int dev, dt;
    int rc = fld__key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    struct fld_op_s *op = fld__op_find(name);
    if (!op)
        return fld__unknown_op(name);
    return fld__select_explain(op, dev, dt, rows, device_type, dtype, out);
}

/* fld_explain() once the public function has checked its arguments. */
static int explain(const char *name, int device_type, DLDataType dtype, fld_resolution **out)
{
    return fld__explain_rows(name, device_type, dtype, 0, out);
}

int fld_explain(const char *name, int device_type, DLDataType dtype, fld_resolution **out)
{
    FLD_CALL_SCOPE();
    if (out)
        *out = NULL;
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!name || !out)
        return fld__fail(FLD_EINVAL, "fld_explain: argument '%s' is NULL", name ? "out" : "op");
    return explain(name, device_type, dtype, out);
}

int fld_resolve(const char *name, int device_type, DLDataType dtype, const char **impl_id)
{
    FLD_CALL_SCOPE();
    if (impl_id)
        *impl_id = NULL;
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!name || !impl_id)
        return fld__fail(FLD_EINVAL, "fld_resolve: argument '%s' is NULL", name ? "impl_id" : "op");
    fld_resolution *res;
    rc = explain(name, device_type, dtype, &res);
    if (rc)
        return rc;
    if (!res->selected) {
        char detail[700] = "";
        size_t len = 0;
        for (size_t i = 0; i < res->n_rejected && len < sizeof detail; i++)
            len += (size_t)snprintf(detail + len, sizeof detail - len, "%s%s: %s", i ? "; " : "",
                                    res->rejected[i].impl_id, res->rejected[i].reason);
        rc = fld__fail(FLD_EUNAVAILABLE, "no available implementation for op '%s' on %s/%s%s%s",
                       name, fld_device_name(device_type), fld_dtype_name(dtype),
                       res->n_rejected ? "; registered: " : " (none registered)", detail);
    } else {
        *impl_id = res->selected;
    }
    fld_resolution_free(res);
    return rc;
}
