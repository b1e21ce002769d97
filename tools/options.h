/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Command-line options of the tool's commands, parsed one way everywhere:
 *
 *   --name VALUE and --name=VALUE   an option that takes a value
 *   --name                          a flag (--name=VALUE is an error)
 *   -h, --help                      the command's help
 *   --                              the end of the options: what follows is
 *                                   an operand even if it starts with '-'
 *
 * A mistyped option is a usage error that names it and the closest known
 * options ("unknown option '--devcie'; did you mean '--device'?").
 *
 *   static const struct cli_option opts[] = {{"--json", false}, {"--device", true}, {NULL, false}};
 *   struct cli_args a;
 *   cli_args_init(&a, "resolve", opts, argc, argv);
 *   const char *value;
 *   int k;
 *   while ((k = cli_args_next(&a, &value)) != CLI_ARG_END) {
 *       if (k == CLI_ARG_ERROR) return CLI_EXIT_USAGE;
 *       ...
 *   }
 */
#ifndef FLD_TOOLS_OPTIONS_H
#define FLD_TOOLS_OPTIONS_H

#include <stdbool.h>

struct cli_option {
    const char *name; /* "--device"; NULL ends the table */
    bool takes_value;
};

struct cli_args {
    const char *cmd; /* for messages: "fldispatch <cmd>: ..." */
    const struct cli_option *options;
    int argc;
    char **argv;
    int next;           /* index of the next argument */
    bool operands_only; /* "--" was seen */
};

enum {
    CLI_ARG_END = -1,     /* no more arguments */
    CLI_ARG_OPERAND = -2, /* *value is an operand (OP, PATH, ...) */
    CLI_ARG_HELP = -3,    /* -h or --help */
    CLI_ARG_ERROR = -4    /* a usage error, already printed (cli_usage_error) */
};

/* argv[0] is the command's name and is skipped. */
void cli_args_init(struct cli_args *a, const char *cmd, const struct cli_option *options, int argc,
                   char **argv);

/*
 * The next argument: the index in options of the option found (*value its
 * value, or NULL for a flag), or one of CLI_ARG_*.
 */
int cli_args_next(struct cli_args *a, const char **value);

#endif
