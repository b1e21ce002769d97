/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A program linked with libfldispatch.a, for test_build: it initialises the
 * library with its default search path and prints what it found.
 *
 *   path <the plugin search path>
 *   plugin <name> <loaded|unavailable|rejected|skipped> <file> | <reason>
 *   rms_norm <the implementation chosen for cpu/f32, or the error>
 *
 * Compiled by the test, with and without -rdynamic; log lines go to stderr.
 */
#include <stdio.h>

#include <fldispatch/fldispatch.h>

static const char *status_word(fld_plugin_status s)
{
    switch (s) {
    case FLD_PLUGIN_LOADED:
        return "loaded";
    case FLD_PLUGIN_UNAVAILABLE:
        return "unavailable";
    case FLD_PLUGIN_REJECTED:
        return "rejected";
    case FLD_PLUGIN_SKIPPED:
        return "skipped";
    }
    return "?";
}

static int show(const fld_plugin_info *info, void *user)
{
    (void)user;
    printf("plugin %s %s %s | %s\n", info->name, status_word(info->status), info->path,
           info->reason);
    return 0;
}

int main(void)
{
    if (fld_init() != FLD_OK) {
        printf("fld_init: %s\n", fld_last_error());
        return 1;
    }
    printf("path %s\n", fld_plugin_path());
    fld_foreach_plugin(show, NULL);
    const DLDataType f32 = {kDLFloat, 32, 1};
    const char *impl = NULL;
    if (fld_resolve("rms_norm", kDLCPU, f32, &impl) == FLD_OK)
        printf("rms_norm %s\n", impl);
    else
        printf("rms_norm error: %s\n", fld_last_error());
    fld_shutdown();
    return 0;
}
