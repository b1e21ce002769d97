/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The device table: one row per device type the host knows. Everything in
 * core that names, counts or checks a device derives from it: the FLD_DEV_*
 * indexes of the cache slots, fld__device_index() (run per call), the names
 * of fld_device_name() and fld_device_from_name(), the manifest's device
 * words, the platforms and their order (platform.c), and the "valid: ..."
 * texts of error messages (fld__device_text()). Outside core, the tool's and
 * the Python extension's device names derive from it through
 * fld__device_row() (<fldispatch/internal/tool_api.h>).
 *
 * A new device type is a row here, its FLD_DEVICE_* and FLD_DEVICE_MASK_* in
 * <fldispatch/fldispatch.h>, its reference attention backend
 * (reference_attention.c), PCI detection when it is an accelerator
 * (platform.c classify_pci()), and its plugin.
 *
 * Columns of FLD_DEVICE_TABLE(X), in the order that decides between several
 * accelerators on one machine:
 *   id          FLD_DEV_<id>, the row's index; FLD_DEVICE_MASK_<id> is its bit
 *   type        its DLPack code (FLD_DEVICE_*); FLD_DEVICE_TYPE_ALIASES lists other codes of a row
 *   name        its name ("cuda")
 *   alias       another name fld_device_from_name() and VLLM_FL_PLATFORM accept, or NULL
 *   platform    the platform it makes a machine (fld_platform())
 *   vendor      the accelerator's vendor, for messages; NULL for the CPU (not an accelerator)
 *   torch       PyTorch's device type of its tensors ("npu": torch_npu's; PyTorch's
 *               ROCm build calls AMD GPUs "cuda")
 *   torch_build the attribute of torch.version set in a PyTorch built for it ("hip"
 *               for ROCm), NULL where no build of PyTorch itself serves it; among the
 *               rows of one torch device type, the one whose build is set is the
 *               device's, else the first
 *
 * Thread-safety: constant data and pure functions, MT safe.
 */
#ifndef FLD_CORE_DEVICES_H
#define FLD_CORE_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#include <fldispatch/fldispatch.h>

/* clang-format off */
#define FLD_DEVICE_TABLE(X)                                                              \
    X(CPU,    FLD_DEVICE_CPU,    "cpu",    NULL,     "cpu",    NULL,     "cpu",  NULL)   \
    X(CUDA,   FLD_DEVICE_CUDA,   "cuda",   "nvidia", "nvidia", "NVIDIA", "cuda", "cuda") \
    X(ROCM,   FLD_DEVICE_ROCM,   "rocm",   NULL,     "rocm",   "AMD",    "cuda", "hip")  \
    X(ASCEND, FLD_DEVICE_ASCEND, "ascend", NULL,     "ascend", "Huawei", "npu",  NULL)

/* Other DLPack codes of a row's device, X(id, type): DLPack's newer Ascend code. */
#define FLD_DEVICE_TYPE_ALIASES(X) \
    X(ASCEND, FLD_DEVICE_ASCEND_DL21)
/* clang-format on */

/* Device indexes of the cache slots; FLD_DEV_ANY is the slot of "any device". */
/* clang-format off */
enum {
#define FLD__DEVICE_ENUM(id, ...) FLD_DEV_##id,
    FLD_DEVICE_TABLE(FLD__DEVICE_ENUM)
#undef FLD__DEVICE_ENUM
    FLD_NDEVICES,
    FLD_DEV_ANY = FLD_NDEVICES
};
/* clang-format on */

/* One row, as data (devices.c). */
struct fld_device_desc {
    int type;
    const char *name;
    const char *alias;
    uint32_t mask;
    const char *platform;
    const char *vendor;
};
extern const struct fld_device_desc fld__devices[FLD_NDEVICES];

/*
 * FLD_DEV_* index of a DLPack device type, or -1. Inline: validation runs it
 * per call. Every code is a case of one switch, aliases included, so that the
 * compiler makes it one table lookup.
 */
static inline int fld__device_index(int device_type)
{
    switch (device_type) {
#define FLD__DEVICE_CASE(id, type, ...)                                                            \
    case type:                                                                                     \
        return FLD_DEV_##id;
        FLD_DEVICE_TABLE(FLD__DEVICE_CASE)
        FLD_DEVICE_TYPE_ALIASES(FLD__DEVICE_CASE)
#undef FLD__DEVICE_CASE
    default:
        return -1;
    }
}

/* The canonical DLPack device type of a FLD_DEV_* index, or 0. */
int fld__device_type_of(int dev_index);

/* The lists the "valid: ..." parts of messages show, written from the table. */
enum fld_device_text {
    FLD_DEVICE_TEXT_CODES,       /* "1 cpu, 2 cuda, 10 rocm, 12 or 21 ascend" */
    FLD_DEVICE_TEXT_ACCEL_CODES, /* the same without the CPU */
    FLD_DEVICE_TEXT_NAMES,       /* "cpu, cuda, rocm, ascend" */
    FLD_DEVICE_TEXT_WORDS, /* the names and their aliases: "cpu, cuda, nvidia, rocm, ascend" */
    FLD_DEVICE_TEXT_ACCEL_PLATFORMS, /* "nvidia, rocm, ascend": the accelerators' order */
    FLD_DEVICE_TEXT_COUNT
};
/* A static string, built once; MT safe. */
const char *fld__device_text(enum fld_device_text which);

#endif
