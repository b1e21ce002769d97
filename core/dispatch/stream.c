/* SPDX-License-Identifier: Apache-2.0 */
/* The calling thread's current stream per device type, for GPU plugins. */
#include <fldispatch/fldispatch.h>

#include "devices.h"
#include "error.h"
#include "ops.h"
#include "reentry.h"

static _Thread_local void *streams[FLD_NDEVICES];

int fld_set_stream(int device_type, void *stream)
{
    int rc = fld__callout_refuse("fld_set_stream");
    if (rc)
        return rc;
    int dev = fld__device_index(device_type);
    if (dev < 0)
        return fld__fail(FLD_EINVAL, "fld_set_stream: unknown device type %d (valid: %s)",
                         device_type, fld__device_text(FLD_DEVICE_TEXT_CODES));
    streams[dev] = stream;
    return FLD_OK;
}

void *fld_get_stream(int device_type)
{
    int dev = fld__device_index(device_type);
    return dev < 0 ? NULL : streams[dev];
}
