/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device graphs for tools (fld_device_graph_*): work captured once through
 * the graph hooks of the device type's provider (device_hooks.h), then
 * replayed and timed by the device. The tool's own calls run between
 * capture_begin and capture_end outside any hook, on the capture stream
 * the host makes current for them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/plugin.h>

#include "device_hooks.h"
#include "devices.h"
#include "error.h"
#include "inflight.h"
#include "reentry.h"

struct fld_device_graph {
    DLDevice device;
    char plugin[128];
    /* The provider's replay hook when captured: a graph is replayed only by its own plugin. */
    int (*replay)(int device_id, void *graph, int replays, double *ns);
    void *handle;
};

/* The provider of device with all four graph hooks, else why not. */
static int graph_provider(const char *fn, DLDevice device, struct fld__hook_provider *p)
{
    if (device.device_id < 0)
        return fld__fail(FLD_EINVAL, "%s: device_id %d is negative", fn, device.device_id);
    int rc = fld__device_provider_find(fn, "device graphs", device.device_type, p);
    if (rc)
        return rc;
    if (!p->hooks)
        return fld__fail(FLD_EUNSUPPORTED,
                         "%s: the cpu has no graphs (a device type with a plugin "
                         "that captures graphs: cuda, rocm)",
                         fn);
    const fld_device_hooks *h = p->hooks;
    const char *missing = !h->capture_begin  ? "capture_begin"
                          : !h->capture_end  ? "capture_end"
                          : !h->graph_replay ? "graph_replay"
                          : !h->graph_free   ? "graph_free"
                                             : NULL;
    return missing ? fld__device_hook_missing(fn, p, missing) : FLD_OK;
}

/* The message now set, kept across calls that may overwrite it. */
struct saved_error {
    char text[1024];
};

static void save_error(struct saved_error *e)
{
    fld__error_copy(e->text, sizeof e->text);
}

static void restore_error(const struct saved_error *e)
{
    fld_set_error("%s", e->text);
}

int fld_device_graph_capture(DLDevice device, int (*record)(void *user), void *user,
                             fld_device_graph **graph)
{
    FLD_CALL_SCOPE();
    static const char fn[] = "fld_device_graph_capture";
    if (!graph)
        return fld__fail(FLD_EINVAL, "%s: argument 'graph' is NULL", fn);
    *graph = NULL;
    if (!record)
        return fld__fail(FLD_EINVAL, "%s: argument 'record' is NULL", fn);
    int rc = fld__callout_refuse(fn);
    if (rc)
        return rc;
    struct fld__hook_provider p;
    if ((rc = graph_provider(fn, device, &p)))
        return rc;
    fld_device_graph *g = calloc(1, sizeof *g);
    if (!g)
        return fld__fail(FLD_ENOMEM, "%s: out of memory", fn);
    g->device = device;
    g->replay = p.hooks->graph_replay;
    snprintf(g->plugin, sizeof g->plugin, "%s", p.plugin);

    void *stream = NULL;
    fld_set_error("%s", "");
    struct fld_callout hook;
    fld__callout_enter(&hook, FLD_CALLOUT_PLUGIN_HOOK, p.plugin, "capture_begin");
    rc = p.hooks->capture_begin(device.device_id, &stream);
    fld__callout_leave(&hook);
    if (rc != FLD_OK) {
        free(g);
        return fld__device_hook_result(rc, fn, &p);
    }

    void *previous = fld_get_stream(device.device_type);
    fld_set_stream(device.device_type, stream);
    fld_set_error("%s", "");
    const int recorded = record(user);
    struct saved_error why;
    save_error(&why);
    fld_set_stream(device.device_type, previous);

    fld_set_error("%s", "");
    fld__callout_enter(&hook, FLD_CALLOUT_PLUGIN_HOOK, p.plugin, "capture_end");
    rc = p.hooks->capture_end(device.device_id, stream, recorded == FLD_OK, &g->handle);
    fld__callout_leave(&hook);
    if (recorded != FLD_OK) {
        /* record's error is the one that matters; the dropped capture's is noise. */
        if (rc == FLD_OK && g->handle) /* a plugin that kept it anyway */
            p.hooks->graph_free(device.device_id, g->handle);
        free(g);
        if (why.text[0])
            restore_error(&why);
        else
            fld_set_error("%s: the record callback failed (%s) without a message", fn,
                          fld_strerror(recorded));
        return recorded;
    }
    if (rc != FLD_OK) {
        free(g);
        return fld__device_hook_result(rc, fn, &p);
    }
    if (!g->handle) {
        free(g);
        return fld__fail(FLD_EIMPL, "%s: plugin '%s' returned FLD_OK and a NULL graph", fn,
                         p.plugin);
    }
    *graph = g;
    return FLD_OK;
}

int fld_device_graph_replay(fld_device_graph *graph, int replays, double *ns)
{
    FLD_CALL_SCOPE();
    static const char fn[] = "fld_device_graph_replay";
    if (!graph)
        return fld__fail(FLD_EINVAL, "%s: argument 'graph' is NULL", fn);
    if (!ns)
        return fld__fail(FLD_EINVAL, "%s: argument 'ns' is NULL", fn);
    if (replays < 1 || replays > FLD_DEVICE_GRAPH_MAX_REPLAYS)
        return fld__fail(FLD_EINVAL, "%s: replays %d is outside 1..%d", fn, replays,
                         FLD_DEVICE_GRAPH_MAX_REPLAYS);
    int rc = fld__callout_refuse(fn);
    if (rc)
        return rc;
    struct fld__hook_provider p;
    if ((rc = graph_provider(fn, graph->device, &p)))
        return rc;
    if (p.hooks->graph_replay != graph->replay)
        return fld__fail(FLD_ESTATE,
                         "%s: the graph was captured by plugin '%s', which no longer serves %s "
                         "(plugin '%s' does): capture it again",
                         fn, graph->plugin, fld_device_name(graph->device.device_type), p.plugin);
    for (int i = 0; i < replays; i++)
        ns[i] = NAN;
    fld_set_error("%s", "");
    struct fld_callout hook;
    fld__callout_enter(&hook, FLD_CALLOUT_PLUGIN_HOOK, p.plugin, "graph_replay");
    rc = p.hooks->graph_replay(graph->device.device_id, graph->handle, replays, ns);
    fld__callout_leave(&hook);
    if (rc != FLD_OK)
        return fld__device_hook_result(rc, fn, &p);
    for (int i = 0; i < replays; i++)
        if (!(ns[i] >= 0) || !isfinite(ns[i]))
            return fld__fail(FLD_EIMPL, "%s: plugin '%s' timed replay %d of %d as %g ns", fn,
                             p.plugin, i, replays, ns[i]);
    return FLD_OK;
}

int fld_device_graph_free(fld_device_graph *graph)
{
    FLD_CALL_SCOPE();
    static const char fn[] = "fld_device_graph_free";
    if (!graph)
        return FLD_OK;
    int rc = fld__callout_refuse(fn);
    if (rc)
        return rc;
    struct fld__hook_provider p;
    rc = graph_provider(fn, graph->device, &p);
    if (rc == FLD_OK && p.hooks->graph_replay == graph->replay) {
        fld_set_error("%s", "");
        struct fld_callout hook;
        fld__callout_enter(&hook, FLD_CALLOUT_PLUGIN_HOOK, p.plugin, "graph_free");
        rc = p.hooks->graph_free(graph->device.device_id, graph->handle);
        fld__callout_leave(&hook);
        rc = fld__device_hook_result(rc, fn, &p);
    } else
        rc = FLD_OK; /* its plugin is gone, and the graph with it */
    free(graph);
    return rc;
}
