/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How this copy of the library is linked (see linkage.h).
 *
 * Objects are compared by load address (dladdr's dli_fbase): the address of
 * one of this file's hidden functions names the object this code is in, and
 * the address the loader gives for fld_registry_register names the object a
 * plugin's calls would reach. A plugin's undefined symbols are looked up in
 * the global scope first, then in its own dependencies, where
 * libfldispatch.so.N is the copy already loaded under that soname or, if
 * none is, a new one from the loader's path.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "fld_paths.h"

#include "linkage.h"

/* The load address of the object holding addr, NULL when unknown. */
static void *object_base(const void *addr)
{
    Dl_info info;
    return addr && dladdr(addr, &info) ? info.dli_fbase : NULL;
}

static void *self_base(void)
{
    return object_base((const void *)fld__linkage_shared);
}

/* fld_registry_register as the loaded libfldispatch.so.N defines it; NULL
 * when no object of that soname is loaded. */
static void *loaded_shared_symbol(void)
{
    void *h = dlopen(FLD_SONAME, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return NULL;
    void *sym = dlsym(h, "fld_registry_register");
    dlclose(h);
    return sym;
}

bool fld__linkage_shared(void)
{
    void *self = self_base();
    return self && object_base(loaded_shared_symbol()) == self;
}

void fld__linkage_object(char *out, size_t size)
{
    Dl_info info;
    char real[PATH_MAX];
    const char *name = "";
    if (dladdr((const void *)fld__linkage_shared, &info) && info.dli_fname)
        name = realpath(info.dli_fname, real) ? real : info.dli_fname;
    snprintf(out, size, "%s", name);
}

bool fld__linkage_plugins_reach_here(char *why, size_t size)
{
    void *self = self_base();
    if (!self)
        return true; /* cannot tell: let the loader decide */
    void *sym = dlsym(RTLD_DEFAULT, "fld_registry_register");
    if (!sym)
        sym = loaded_shared_symbol();
    if (sym && object_base(sym) == self)
        return true;

    char here[PATH_MAX];
    fld__linkage_object(here, sizeof here);
    Dl_info other;
    if (sym && dladdr(sym, &other) && other.dli_fname && other.dli_fname[0])
        snprintf(why, size,
                 "its calls into the library would reach another copy of libfldispatch (%s), "
                 "not this one (linked statically into %s); link the program with -rdynamic, or "
                 "use libfldispatch.so only (docs/install.md)",
                 other.dli_fname, here[0] ? here : "the program");
    else
        snprintf(why, size,
                 "this copy of libfldispatch is linked statically into %s, which does not export "
                 "the library's functions, so the plugin would load a separate copy (" FLD_SONAME
                 "); link the program with -rdynamic, or against libfldispatch.so "
                 "(docs/install.md)",
                 here[0] ? here : "the program");
    return false;
}
