/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a descriptor with the wrong magic number (a symbol of the right
 * name that is not a descriptor). Rejected before anything is called:
 * register_builtins aborts.
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int register_builtins(fld_registry *reg)
{
    (void)reg;
    fprintf(stderr, "bad_magic fixture: register_builtins was called despite a bad magic\n");
    abort();
}

__attribute__((visibility("default"))) const fld_plugin_descriptor fld_plugin_entry = {
    .magic = 0xdeadbeefu,
    .abi_major = FLD_PLUGIN_ABI_MAJOR,
    .abi_minor = FLD_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(fld_plugin_descriptor),
    .flags = 0,
    .name = "bad_magic",
    .version = "1.0.0",
    .host_version = FLD_VERSION_STRING,
    .register_builtins = register_builtins,
};
