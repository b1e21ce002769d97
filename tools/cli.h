/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fldispatch command-line tool: shared declarations of its commands
 * (cmd_*.c) and the helpers main.c provides them.
 */
#ifndef FLD_TOOLS_CLI_H
#define FLD_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fldispatch/plugin.h>

/* Exit statuses, the same for every command (docs/user-guide.md). */
enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_CHECK_FAILED = 1, /* a check failed, or the library failed unexpectedly */
    CLI_EXIT_USAGE = 2,        /* usage or configuration error */
    CLI_EXIT_NONE = 3          /* no implementation available */
};

/* Each command gets argv[0] = its own name. */
int cmd_list(int argc, char **argv);
int cmd_resolve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_freeze(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_stats(int argc, char **argv);

/*
 * Prints "fldispatch <cmd>: <message>" and a one-line hint to stderr and
 * returns CLI_EXIT_USAGE. cmd NULL for the top level.
 */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Initialises the library; on failure prints fld_last_error() and returns CLI_EXIT_USAGE. */
int cli_init(void);

/* "-h" or "--help". */
bool cli_is_help(const char *arg);

/* "cpu,cuda" / "f32,bf16" lists of a FLD_DEVICE_MASK_* / FLD_DTYPE_MASK_* mask. */
const char *cli_devices_text(uint32_t mask, char *buf, size_t size);
const char *cli_dtypes_text(uint32_t mask, char *buf, size_t size);
/* Names of the mask bits, for JSON arrays; NULL past the last bit. */
const char *cli_device_bit_name(unsigned bit);
const char *cli_dtype_bit_name(unsigned bit);
/* The FLD_DEVICE_MASK_* bit of a device type (both Ascend codes give ASCEND); 0 if unknown. */
uint32_t cli_device_mask(int device_type);

/*
 * The devices, from the library's device table (fld__device_row() of
 * <fldispatch/internal/tool_api.h>), so that a new row needs no edit here.
 * Bit b of a FLD_DEVICE_MASK_* mask is row b.
 */
#define CLI_MAX_DEVICES 32 /* bits of a FLD_DEVICE_MASK_* mask: a bound on the rows */
/* Rows of the table. */
unsigned cli_device_count(void);
/* The DLPack code (FLD_DEVICE_*) of the device of mask bit `bit`; 0 past the last row. */
int cli_device_bit_type(unsigned bit);
/* The device names for --device help and messages, in the table's order. */
enum cli_device_list {
    CLI_DEVICES,            /* "cpu, cuda, rocm, ascend" */
    CLI_DEVICES_OR,         /* "cpu, cuda, rocm or ascend" */
    CLI_DEVICES_DEFAULT,    /* "cpu (default), cuda, rocm, ascend" */
    CLI_DEVICES_DEFAULT_OR, /* "cpu (default), cuda, rocm or ascend" */
    CLI_DEVICE_LIST_COUNT
};
/* A static string, built on first use (the tool is single-threaded). */
const char *cli_device_list(enum cli_device_list style);

/*
 * s escaped for the terminal (text.c): control characters, invalid UTF-8
 * and bidirectional controls as \xNN / \uNNNN, as the library's messages.
 * Every name, path, version or configuration value printed as text goes
 * through it. The result stays valid until 8 more calls; NULL gives "(null)".
 */
const char *cli_text(const char *s);

/* "loaded", "unavailable", "rejected", "skipped". */
const char *cli_plugin_status_name(fld_plugin_status st);

#endif
