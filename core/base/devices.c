/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The device table's data and the names and texts derived from it
 * (devices.h): fld_device_name(), fld_device_from_name(), the "valid: ..."
 * lists of messages, and the rows as the tool and the Python extension see
 * them (fld__device_row(), <fldispatch/internal/tool_api.h>).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <fldispatch/fldispatch.h>
#include <fldispatch/internal/tool_api.h>

#include "devices.h"
#include "error.h"

#define FLD__DEVICE_MASK_CHECK(id, ...)                                                            \
    _Static_assert(FLD_DEVICE_MASK_##id == 1u << FLD_DEV_##id,                                     \
                   "FLD_DEVICE_MASK_" #id " is not the bit of its row");
FLD_DEVICE_TABLE(FLD__DEVICE_MASK_CHECK)
#undef FLD__DEVICE_MASK_CHECK
_Static_assert(FLD_DEVICE_MASK_ALL == (1u << FLD_NDEVICES) - 1,
               "FLD_DEVICE_MASK_ALL is not the bits of the table's rows");

const struct fld_device_desc fld__devices[FLD_NDEVICES] = {
#define FLD__DEVICE_ROW(id, type, name, alias, platform, vendor, ...)                              \
    [FLD_DEV_##id] = {type, name, alias, FLD_DEVICE_MASK_##id, platform, vendor},
    FLD_DEVICE_TABLE(FLD__DEVICE_ROW)
#undef FLD__DEVICE_ROW
};

static const struct {
    int dev, type;
} type_aliases[] = {
#define FLD__DEVICE_ALIAS(id, type) {FLD_DEV_##id, type},
    FLD_DEVICE_TYPE_ALIASES(FLD__DEVICE_ALIAS)
#undef FLD__DEVICE_ALIAS
};

int fld__device_type_of(int dev_index)
{
    return dev_index >= 0 && dev_index < FLD_NDEVICES ? fld__devices[dev_index].type : 0;
}

/* FLD_DEV_* index of a device name or its alias ("nvidia"), or -1. */
static int device_index_of_name(const char *name)
{
    for (int i = 0; i < FLD_NDEVICES; i++) {
        const struct fld_device_desc *d = &fld__devices[i];
        if (strcmp(name, d->name) == 0 || (d->alias && strcmp(name, d->alias) == 0))
            return i;
    }
    return -1;
}

const char *fld_device_name(int device_type)
{
    int i = fld__device_index(device_type);
    return i < 0 ? NULL : fld__devices[i].name;
}

int fld_device_from_name(const char *name, int *device_type)
{
    if (!name || !device_type)
        return fld__fail(FLD_EINVAL, "fld_device_from_name: argument '%s' is NULL",
                         name ? "device_type" : "name");
    int i = device_index_of_name(name);
    if (i < 0)
        return fld__fail(FLD_EINVAL, "unknown device '%s' (valid: %s)", name,
                         fld__device_text(FLD_DEVICE_TEXT_WORDS));
    *device_type = fld__devices[i].type;
    return FLD_OK;
}

/* ---- the "valid: ..." lists ------------------------------------------------ */

static char texts[FLD_DEVICE_TEXT_COUNT][128];
static char row_codes[FLD_NDEVICES][32]; /* "12 or 21": fld_tool_device.codes */
static pthread_once_t texts_once = PTHREAD_ONCE_INIT;

/* Appends ", item" (or the first item) to one of the texts. */
static void append(char *buf, const char *item)
{
    size_t len = strlen(buf);
    const size_t size = sizeof texts[0];
    if (len < size)
        snprintf(buf + len, size - len, "%s%s", len ? ", " : "", item);
}

static void build_texts(void)
{
    for (int i = 0; i < FLD_NDEVICES; i++) {
        const struct fld_device_desc *d = &fld__devices[i];
        const bool accelerator = d->vendor != NULL;
        char codes[64]; /* "12 or 21 ascend" */
        size_t len = (size_t)snprintf(codes, sizeof codes, "%d", d->type);
        for (size_t k = 0; k < sizeof type_aliases / sizeof type_aliases[0]; k++)
            if (type_aliases[k].dev == i && len < sizeof codes)
                len += (size_t)snprintf(codes + len, sizeof codes - len, " or %d",
                                        type_aliases[k].type);
        snprintf(row_codes[i], sizeof row_codes[i], "%s", codes);
        if (len < sizeof codes)
            snprintf(codes + len, sizeof codes - len, " %s", d->name);
        append(texts[FLD_DEVICE_TEXT_CODES], codes);
        append(texts[FLD_DEVICE_TEXT_NAMES], d->name);
        append(texts[FLD_DEVICE_TEXT_WORDS], d->name);
        if (d->alias)
            append(texts[FLD_DEVICE_TEXT_WORDS], d->alias);
        if (accelerator) {
            append(texts[FLD_DEVICE_TEXT_ACCEL_CODES], codes);
            append(texts[FLD_DEVICE_TEXT_ACCEL_PLATFORMS], d->platform);
        }
    }
}

const char *fld__device_text(enum fld_device_text which)
{
    pthread_once(&texts_once, build_texts);
    return which >= 0 && which < FLD_DEVICE_TEXT_COUNT ? texts[which] : "";
}

/* ---- the rows for the tool (tool_api.h) --------------------------------------- */

static const struct fld_tool_device tool_rows[FLD_NDEVICES] = {
#define FLD__DEVICE_TOOL_ROW(id, type, name, alias, platform, vendor, torch, torch_build)        \
    [FLD_DEV_##id] = {type,  name, alias, FLD_DEVICE_MASK_##id, row_codes[FLD_DEV_##id],         \
                      torch, torch_build},
    FLD_DEVICE_TABLE(FLD__DEVICE_TOOL_ROW)
#undef FLD__DEVICE_TOOL_ROW
};

const struct fld_tool_device *fld__device_row(unsigned index)
{
    pthread_once(&texts_once, build_texts); /* the codes */
    return index < FLD_NDEVICES ? &tool_rows[index] : NULL;
}
