/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch doctor [--json] [--timeout SECONDS] [PATH...]: loads each plugin
 * file in a child process (dlopen, descriptor checks, register_builtins into
 * a scratch registry, every availability check) and reports what happened to
 * it: ok, unavailable, rejected, crashed (signal and stage), hung or exited.
 *
 * The tool never initialises the library here: the plugins are only ever
 * loaded in the children, so a crashing plugin cannot take the doctor down.
 * It is single-threaded, so it forks (core/registry/probe.c). The hidden form
 * "doctor --probe-child FD PATH" is the helper the library spawns for
 * VLLM_FL_PLUGIN_PROBE.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <fldispatch/internal/tool_api.h>

#include "cli.h"
#include "json.h"
#include "options.h"

static const char doctor_usage[] =
    "Usage: fldispatch doctor [--json] [--timeout SECONDS] [--] [PATH...]\n"
    "\n"
    "Loads each plugin file in a child process, as the host would (permission\n"
    "checks, dlopen, descriptor and ABI checks, register_builtins, every\n"
    "implementation's and device hook's availability check), and reports per\n"
    "file: ok (implementations and their availability), unavailable, rejected\n"
    "(why), crashed (signal and stage), hung (killed after the timeout) or\n"
    "exited (status). Stages: dlopen (static constructors), descriptor,\n"
    "register_builtins, availability.\n"
    "\n"
    "Without PATH, every plugin file of the search path and of\n"
    "VLLM_FL_PLUGIN_MODULES is checked.\n"
    "\n"
    "  --timeout SECONDS   how long one plugin may take (default 10)\n"
    "  --json              one JSON object {\"schema\", \"plugin_path\" (null\n"
    "                      when PATHs were given), \"timeout\", \"plugins\": [...],\n"
    "                      \"summary\", \"healthy\"} (docs/schemas/doctor.schema.json)\n"
    "\n"
    "Exit status: 0 when every plugin is ok or unavailable (a plugin that cannot\n"
    "run on this machine is not a fault); 1 when one was rejected, crashed, hung,\n"
    "exited or could not be probed; 2 usage error.\n";

#define N_STATES (FLD_PROBE_ERROR + 1)

struct checked {
    char *path;
    struct fld_probe_result r;
};

static const char *hook_device_name(int device_type, char *buf, size_t size)
{
    const char *name = fld_device_name(device_type);
    if (name)
        return name;
    snprintf(buf, size, "device %d", device_type);
    return buf;
}

static size_t count_available(const struct fld_probe_result *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_impls; i++)
        n += r->impls[i].available;
    return n;
}

/* A plugin the host would refuse is as much a fault of the installation as one that crashes. */
static bool healthy_state(enum fld_probe_state s)
{
    return s == FLD_PROBE_OK || s == FLD_PROBE_UNAVAILABLE;
}

/* ---- text ------------------------------------------------------------------ */

static void print_text(const struct checked *c, size_t n, const char *search_path, double timeout)
{
    printf("fldispatch doctor: %zu plugin file(s), each loaded in a child process (timeout %g s)\n",
           n, timeout);
    if (search_path)
        printf("Plugin search path: %s\n", cli_text(search_path));
    printf("\n");
    size_t counts[N_STATES] = {0};
    for (size_t i = 0; i < n; i++) {
        const struct fld_probe_result *r = &c[i].r;
        counts[r->state]++;
        char what[1200];
        if (r->state == FLD_PROBE_OK && r->have_descriptor)
            snprintf(what, sizeof what,
                     "%s %s (ABI %u.%u, %s): %zu implementation(s), %zu available", r->name,
                     r->version, r->abi_major, r->abi_minor, r->in_tree ? "in-tree" : "out-of-tree",
                     r->n_impls, count_available(r));
        else if (r->state == FLD_PROBE_UNAVAILABLE)
            snprintf(what, sizeof what, "%s %s: no implementation can run here: %s", r->name,
                     r->version, r->reason);
        else
            snprintf(what, sizeof what, "%s", r->reason);
        printf("%-12s %s: %s (%.3f s)\n", fld__probe_state_name(r->state), cli_text(c[i].path),
               cli_text(what), r->seconds);
        if (r->detail[0])
            printf("%-12s   detail: %s\n", "", cli_text(r->detail));
        /* An unavailable plugin usually gives one reason for everything: it is
         * on the plugin's line already. */
        bool same = r->state == FLD_PROBE_UNAVAILABLE;
        for (size_t k = 0; same && k < r->n_impls; k++)
            same = strcmp(r->impls[k].reason, r->reason) == 0;
        for (size_t k = 0; k < r->n_impls; k++) {
            const struct fld_probe_impl *m = &r->impls[k];
            printf("%-12s   %-20s %-22s %s%s\n", "", cli_text(m->op), cli_text(m->impl_id),
                   m->available ? "available"
                   : same       ? "unavailable"
                                : "unavailable: ",
                   m->available || same ? "" : cli_text(m->reason));
        }
        for (size_t k = 0; k < r->n_hooks; k++) {
            const struct fld_probe_hook *h = &r->hooks[k];
            char dev[16], label[32];
            snprintf(label, sizeof label, "device %s",
                     hook_device_name(h->device_type, dev, sizeof dev));
            printf("%-12s   %-43s %s%s\n", "", label,
                   h->available ? "available" : "unavailable: ",
                   h->available ? "" : cli_text(h->reason));
        }
    }
    printf("\nSummary: %zu plugin file(s):", n);
    for (int s = 0; s < N_STATES; s++)
        if (s != FLD_PROBE_ERROR || counts[s])
            printf("%s %zu %s", s ? "," : "", counts[s],
                   fld__probe_state_name((enum fld_probe_state)s));
    printf("\n");
}

/* ---- JSON ------------------------------------------------------------------ */

static void print_json(const struct checked *c, size_t n, const char *search_path, double timeout,
                       bool healthy)
{
    struct json_writer w;
    json_begin_document(&w, stdout);
    json_key(&w, "plugin_path");
    json_split(&w, search_path, ":");
    json_key(&w, "timeout");
    json_double(&w, timeout, 3);
    json_key(&w, "plugins");
    json_begin_array(&w);
    size_t counts[N_STATES] = {0};
    for (size_t i = 0; i < n; i++) {
        const struct fld_probe_result *r = &c[i].r;
        bool desc = r->have_descriptor;
        counts[r->state]++;
        json_begin_object(&w);
        json_key(&w, "path");
        json_string(&w, c[i].path);
        json_key(&w, "status");
        json_string(&w, fld__probe_state_name(r->state));
        json_key(&w, "stage");
        json_string(&w, fld__probe_stage_name(r->stage));
        json_key(&w, "signal");
        char sig[16];
        if (r->state == FLD_PROBE_CRASHED) {
            json_int(&w, r->signal);
            json_key(&w, "signal_name");
            json_string(&w, fld__probe_signal_name(r->signal, sig, sizeof sig));
        } else {
            json_null(&w);
            json_key(&w, "signal_name");
            json_null(&w);
        }
        json_key(&w, "exit_status");
        if (r->state == FLD_PROBE_EXITED)
            json_int(&w, r->exit_status);
        else
            json_null(&w);
        json_key(&w, "seconds");
        json_double(&w, r->seconds, 3);
        json_key(&w, "reason");
        json_text_or_null(&w, r->state == FLD_PROBE_OK ? NULL : r->reason);
        json_key(&w, "name");
        json_string(&w, desc ? r->name : NULL);
        json_key(&w, "version");
        json_text_or_null(&w, desc ? r->version : NULL);
        json_key(&w, "abi_major");
        if (desc)
            json_int(&w, r->abi_major);
        else
            json_null(&w);
        json_key(&w, "abi_minor");
        if (desc)
            json_int(&w, r->abi_minor);
        else
            json_null(&w);
        json_key(&w, "in_tree");
        if (desc)
            json_bool(&w, r->in_tree);
        else
            json_null(&w);
        json_key(&w, "detail");
        json_text_or_null(&w, r->detail);
        json_key(&w, "impls");
        json_begin_array(&w);
        for (size_t k = 0; k < r->n_impls; k++) {
            const struct fld_probe_impl *m = &r->impls[k];
            json_begin_object(&w);
            json_key(&w, "op");
            json_string(&w, m->op);
            json_key(&w, "impl_id");
            json_string(&w, m->impl_id);
            json_key(&w, "available");
            json_bool(&w, m->available);
            json_key(&w, "reason");
            json_string(&w, m->available ? NULL : *m->reason ? m->reason : "unavailable");
            json_end_object(&w);
        }
        json_end_array(&w);
        json_key(&w, "device_hooks");
        json_begin_array(&w);
        for (size_t k = 0; k < r->n_hooks; k++) {
            const struct fld_probe_hook *h = &r->hooks[k];
            char dev[16];
            json_begin_object(&w);
            json_key(&w, "device");
            json_string(&w, hook_device_name(h->device_type, dev, sizeof dev));
            json_key(&w, "available");
            json_bool(&w, h->available);
            json_key(&w, "reason");
            json_string(&w, h->available ? NULL : *h->reason ? h->reason : "unavailable");
            json_end_object(&w);
        }
        json_end_array(&w);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "summary");
    json_begin_object(&w);
    for (int s = 0; s < N_STATES; s++) {
        json_key(&w, fld__probe_state_name((enum fld_probe_state)s));
        json_int(&w, (long long)counts[s]);
    }
    json_end_object(&w);
    json_key(&w, "healthy");
    json_bool(&w, healthy);
    json_end_object(&w);
    json_finish(&w);
}

/* ---- the command ----------------------------------------------------------- */

/* The helper the library spawns: reports on fd, never returns. */
static int probe_child(int argc, char **argv)
{
    char *end;
    long fd = argc == 4 ? strtol(argv[2], &end, 10) : -1;
    if (argc != 4 || *end || fd < 0 || fd > INT_MAX || argv[3][0] != '/')
        return cli_usage_error("doctor", "--probe-child needs a descriptor and an absolute path");
    fld__probe_child_main((int)fd, argv[3]);
}

static int parse_timeout(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v <= 0 || v > FLD_PROBE_MAX_TIMEOUT)
        return cli_usage_error("doctor",
                               "invalid --timeout '%s' (seconds, more than 0 and at most %g)", text,
                               FLD_PROBE_MAX_TIMEOUT);
    *out = v;
    return CLI_EXIT_OK;
}

static void check_one(struct checked *c, double timeout)
{
    struct stat st;
    char why[sizeof c->r.reason];
    if (!fld__plugin_check_file(c->path, &st, why, sizeof why)) {
        /* The host would not map it: neither does the doctor. */
        memset(&c->r, 0, sizeof c->r);
        c->r.state = FLD_PROBE_REJECTED;
        snprintf(c->r.reason, sizeof c->r.reason, "%s", why);
        return;
    }
    const struct fld_probe_options opt = {.timeout = timeout, .mode = FLD_PROBE_FORK};
    fld__probe_run(c->path, &opt, &c->r);
}

int cmd_doctor(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--probe-child") == 0)
        return probe_child(argc, argv);
    enum { OPT_JSON, OPT_TIMEOUT };
    static const struct cli_option options[] = {
        [OPT_JSON] = {"--json", false},
        [OPT_TIMEOUT] = {"--timeout", true},
        {NULL, false},
    };
    bool json = false;
    double timeout = FLD_PROBE_DEFAULT_TIMEOUT;
    char **given = calloc((size_t)argc, sizeof *given);
    size_t n_given = 0;
    if (!given) {
        fprintf(stderr, "fldispatch doctor: out of memory\n");
        return CLI_EXIT_CHECK_FAILED;
    }
    int rc = CLI_EXIT_OK;
    struct cli_args a;
    cli_args_init(&a, "doctor", options, argc, argv);
    const char *value;
    for (int k; rc == CLI_EXIT_OK && (k = cli_args_next(&a, &value)) != CLI_ARG_END;) {
        switch (k) {
        case CLI_ARG_HELP:
            fputs(doctor_usage, stdout);
            free(given);
            return CLI_EXIT_OK;
        case CLI_ARG_ERROR:
            rc = CLI_EXIT_USAGE;
            break;
        case CLI_ARG_OPERAND:
            given[n_given++] = (char *)value;
            break;
        case OPT_JSON:
            json = true;
            break;
        case OPT_TIMEOUT:
            rc = parse_timeout(value, &timeout);
            break;
        }
    }
    if (rc != CLI_EXIT_OK) {
        free(given);
        return rc;
    }

    char **paths = NULL, *search_path = NULL;
    size_t n = 0;
    struct checked *c = NULL;
    if (n_given == 0) {
        if (fld__plugin_candidates(&paths, &n, &search_path) != FLD_OK) {
            fprintf(stderr, "fldispatch doctor: %s\n", fld_last_error());
            free(given);
            return CLI_EXIT_CHECK_FAILED;
        }
    }
    size_t total = n_given ? n_given : n;
    c = calloc(total ? total : 1, sizeof *c);
    if (!c) {
        fprintf(stderr, "fldispatch doctor: out of memory\n");
        rc = CLI_EXIT_CHECK_FAILED;
        goto out;
    }
    for (size_t i = 0; i < total; i++) {
        const char *p = n_given ? given[i] : paths[i];
        char real[PATH_MAX];
        if (!realpath(p, real)) {
            rc = cli_usage_error("doctor", "cannot use '%s': %s", p, strerror(errno));
            goto out;
        }
        if (!(c[i].path = strdup(real))) {
            fprintf(stderr, "fldispatch doctor: out of memory\n");
            rc = CLI_EXIT_CHECK_FAILED;
            goto out;
        }
    }
    bool healthy = true;
    for (size_t i = 0; i < total; i++) {
        check_one(&c[i], timeout);
        healthy = healthy && healthy_state(c[i].r.state);
    }
    if (json)
        print_json(c, total, search_path, timeout, healthy);
    else
        print_text(c, total, search_path, timeout);
    rc = healthy ? CLI_EXIT_OK : CLI_EXIT_CHECK_FAILED;
out:
    for (size_t i = 0; c && i < total; i++) {
        free(c[i].path);
        fld__probe_result_free(&c[i].r);
    }
    free(c);
    fld__plugin_candidates_free(paths, n, search_path);
    free(given);
    return rc;
}
