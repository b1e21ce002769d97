/* The calling thread's current stream per device type, for GPU plugins. */
#include <fldispatch/fldispatch.h>

#include "error.h"
#include "ops.h"

static _Thread_local void *streams[FLD_NDEVICES];

int fld_set_stream(int device_type, void *stream)
{
    int dev = fld__device_index(device_type);
    if (dev < 0)
        return fld__fail(FLD_EINVAL,
                         "fld_set_stream: unknown device type %d (valid: 1 cpu, 2 cuda, "
                         "10 rocm, 12 or 21 ascend)",
                         device_type);
    streams[dev] = stream;
    return FLD_OK;
}

void *fld_get_stream(int device_type)
{
    int dev = fld__device_index(device_type);
    return dev < 0 ? NULL : streams[dev];
}
