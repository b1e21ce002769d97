/* SPDX-License-Identifier: Apache-2.0 */
#include "options.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "suggest.h"

void cli_args_init(struct cli_args *a, const char *cmd, const struct cli_option *options, int argc,
                   char **argv)
{
    a->cmd = cmd;
    a->options = options;
    a->argc = argc;
    a->argv = argv;
    a->next = 1;
    a->operands_only = false;
}

static int unknown_option(const struct cli_args *a, const char *arg, size_t name_len)
{
    const char *names[64];
    size_t n = 0;
    for (const struct cli_option *o = a->options; o->name && n < 62; o++)
        names[n++] = o->name;
    names[n++] = "--help";
    char given[128], hint[160];
    snprintf(given, sizeof given, "%.*s", (int)(name_len < 100 ? name_len : 100), arg);
    cli_did_you_mean(given, names, n, hint, sizeof hint);
    return cli_usage_error(a->cmd, "unknown option '%s'%s", arg, hint);
}

int cli_args_next(struct cli_args *a, const char **value)
{
    *value = NULL;
    if (a->next >= a->argc)
        return CLI_ARG_END;
    const char *arg = a->argv[a->next++];
    if (a->operands_only || arg[0] != '-' || arg[1] == '\0') {
        *value = arg;
        return CLI_ARG_OPERAND;
    }
    if (strcmp(arg, "--") == 0) {
        a->operands_only = true;
        return cli_args_next(a, value);
    }
    if (cli_is_help(arg))
        return CLI_ARG_HELP;

    size_t name_len = strcspn(arg, "=");
    for (int i = 0; a->options[i].name; i++) {
        const struct cli_option *o = &a->options[i];
        if (strlen(o->name) != name_len || strncmp(arg, o->name, name_len) != 0)
            continue;
        if (!o->takes_value) {
            if (arg[name_len] == '=') {
                cli_usage_error(a->cmd, "option '%s' takes no value", o->name);
                return CLI_ARG_ERROR;
            }
            return i;
        }
        if (arg[name_len] == '=') {
            *value = arg + name_len + 1;
            return i;
        }
        if (a->next >= a->argc) {
            cli_usage_error(a->cmd, "option '%s' needs a value", o->name);
            return CLI_ARG_ERROR;
        }
        *value = a->argv[a->next++];
        return i;
    }
    unknown_option(a, arg, name_len);
    return CLI_ARG_ERROR;
}
