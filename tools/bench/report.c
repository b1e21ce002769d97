/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch bench OP...: the report of a kernel benchmark run, as a text
 * table or as JSON (docs/schemas/bench.schema.json), from the record
 * kernels.c fills (report.h). It derives the figures of each
 * line from the record -- GB/s, share of the ceiling (the median STREAM
 * triad of the same thread count, or the median d2d copy on a device),
 * elements per second and per CPU cycle -- and prints nothing else: the
 * project's speed targets are checked by bench/targets.py, outside the
 * shipped tool.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report.h"
#include "../cli.h"
#include "../json.h"
#include "../tensors.h"

/* ---- the ceilings --------------------------------------------------------------- */

/* The median d2d copy bandwidth over the runs. */
static double d2d_figure(const struct bench_run *r)
{
    double v[sizeof r->d2d_gbps / sizeof r->d2d_gbps[0]];
    memcpy(v, r->d2d_gbps, (size_t)r->d2d_runs * sizeof v[0]);
    return bench_median(v, r->d2d_runs);
}

/* The median over the STREAM runs for a thread count; NAN if never measured. */
static double stream_figure(const struct bench_run *r, int threads, bool copy)
{
    double v[1024];
    int n = 0;
    for (size_t i = 0; i < r->n_samples && n < 1024; i++)
        if (r->samples[i].threads == threads)
            v[n++] = copy ? r->samples[i].copy_gbps : r->samples[i].triad_gbps;
    return bench_median(v, n);
}

static double bw_share(const struct bench_run *r, const struct bench_result *res)
{
    double ceiling = r->on_device ? d2d_figure(r) : stream_figure(r, res->threads, false);
    return res->bytes / (res->us * 1e-6) * 1e-9 / ceiling;
}

static double gbps(const struct bench_result *res)
{
    return res->bytes / (res->us * 1e-6) * 1e-9;
}

/* Giga-elements per second. */
static double gelems(const struct bench_result *res)
{
    return res->elements / (res->us * 1e-6) * 1e-9;
}

/* Elements per CPU cycle; NAN on other devices or when the clock is unknown. */
static double elems_per_cycle(const struct bench_run *r, const struct bench_result *res)
{
    if (r->on_device || r->cpu_ghz <= 0)
        return NAN;
    return gelems(res) / r->cpu_ghz;
}

void bench_report_text(const struct bench_run *r)
{
    const struct bench_kernel_options *opt = r->opt;
    printf("fldispatch bench: %s, median of %d timed batches of >= %.0f ms per line (calls through "
           "fld_call, pinned, strict%s)\n",
           fld_device_name(opt->device_type), opt->reps, r->batch_ns * 1e-6,
           r->on_device ? "; each batch ends with fld_device_synchronize" : "");
    printf("machine: %s; %d allowed cpus; last-level cache %.1f MiB\n", cli_text(r->cpu),
           bench_allowed_cpus(), (double)bench_llc_bytes() / (1 << 20));
    if (r->on_device) {
        printf("device: %s 0, memory from plugin '%s': %s\n", fld_device_name(opt->device_type),
               cli_text(r->provider),
               r->provider_detail[0] ? cli_text(r->provider_detail) : "(no detail line)");
        printf("d2d copy: %.0f MiB buffer, read + write counted, median of %d batches per run, "
               "median of %d runs (before, between and after the kernels): %.2f GB/s\n",
               (double)bench_d2d_bytes(r->d2d) / (1 << 20), opt->reps, r->d2d_runs, d2d_figure(r));
    } else if (r->plugin.found)
        printf("cpu plugin: %s\n",
               r->plugin.detail[0] ? cli_text(r->plugin.detail) : "(no detail line)");
    else
        printf("cpu plugin: not loaded\n");
    if (!r->on_device) {
        printf("threads: %d by default", r->default_threads);
        if (r->reinit) {
            printf("; measured with %s=", ENV_THREADS);
            for (int g = 0; g < r->n_groups; g++)
                printf("%s%d", g ? "," : "", r->group_threads[g]);
        }
        printf("\n");
        printf("STREAM: %s loops, 3 arrays of %.0f MiB, best of %d per run, median of %d runs "
               "(before, between and after the kernels)\n",
               bench_stream_isa(), (double)bench_stream_array_bytes(r->stream) / (1 << 20),
               opt->reps, r->stream_runs);
        printf("cpu clock: %.2f GHz (%s)\n", r->cpu_ghz,
               strcmp(r->cpu_ghz_source, "calibrated") == 0
                   ? "calibrated: a chain of dependent adds, one per cycle, fastest of 30 runs"
                   : "/proc/cpuinfo cpu MHz: the adds could not be timed");
        printf("  %7s %12s %12s\n", "threads", "triad GB/s", "copy GB/s");
        for (int i = 0; i < r->n_stream_threads; i++)
            printf("  %7d %12.2f %12.2f\n", r->stream_threads[i],
                   stream_figure(r, r->stream_threads[i], false),
                   stream_figure(r, r->stream_threads[i], true));
    }

    printf("\n%-18s %-15s %-5s %-15s %7s %12s %9s %9s %8s %7s\n", "op", "impl", "dtype", "shape",
           "threads", "us", "GB/s", "bw_share", "Gelem/s", "el/cyc");
    for (size_t i = 0; i < r->n_results; i++) {
        const struct bench_result *res = &r->results[i];
        char threads[16] = "-";
        if (!r->on_device)
            snprintf(threads, sizeof threads, "%d", res->threads);
        printf("%-18s %-15s %-5s %-15s %7s ", res->op_name, cli_text(res->impl),
               tool_dtype_name(res->dtype), res->shape, threads);
        if (isnan(res->us)) {
            printf("%12s %9s %9s %8s %7s\n", "failed", "-", "-", "-", "-");
        } else {
            printf("%12.3f %9.2f %8.1f%% %8.3f ", res->us, gbps(res), 100 * bw_share(r, res),
                   gelems(res));
            double epc = elems_per_cycle(r, res);
            if (isnan(epc))
                printf("%7s\n", "-");
            else
                printf("%7.3f\n", epc);
        }
    }
    printf("\nshapes: gated activations [T, 2H] -> [T, H] shown TxH; elementwise ones [T, H] -> "
           "[T, H];\nnorms [T, H] with weight, +res with a fused residual;\nrotary T tokens x %lld "
           "query and %lld key heads x %d, rot_dim %d, neox. %s\n",
           (long long)(opt->hidden / ROTARY_HEAD_SIZE), (long long)(opt->hidden / ROTARY_HEAD_SIZE),
           ROTARY_HEAD_SIZE, ROTARY_HEAD_SIZE,
           r->on_device ? "bw_share: GB/s over the d2d copy's GB/s (baseline d2d_copy)."
                        : "bw_share over 100%: the data fit in the caches.");
}

static void json_figure(struct json_writer *w, const char *key, double v, int decimals)
{
    json_key(w, key);
    json_double(w, v, decimals);
}

void bench_report_json(const struct bench_run *r)
{
    const struct bench_kernel_options *opt = r->opt;
    struct json_writer w;
    json_begin_document_schema(&w, stdout, JSON_SCHEMA_BENCH_KERNELS);
    json_key(&w, "benchmark");
    json_string(&w, "kernels");
    json_key(&w, "machine");
    json_begin_object(&w);
    json_key(&w, "cpu");
    json_string(&w, r->cpu);
    json_key(&w, "isa");
    json_string(&w, r->isa);
    json_key(&w, "threads");
    json_int(&w, r->default_threads);
    json_figure(&w, "cpu_ghz", r->cpu_ghz > 0 ? r->cpu_ghz : NAN, 3);
    json_key(&w, "cpu_ghz_source");
    json_string(&w, r->cpu_ghz > 0 ? r->cpu_ghz_source : NULL);
    json_figure(&w, "stream_gbps_1t", stream_figure(r, 1, false), 3);
    json_figure(&w, "stream_gbps", stream_figure(r, r->default_threads, false), 3);
    json_figure(&w, "stream_copy_gbps_1t", stream_figure(r, 1, true), 3);
    json_figure(&w, "stream_copy_gbps", stream_figure(r, r->default_threads, true), 3);
    json_key(&w, "stream");
    json_begin_array(&w);
    for (int i = 0; i < r->n_stream_threads; i++) {
        json_begin_object(&w);
        json_key(&w, "threads");
        json_int(&w, r->stream_threads[i]);
        json_figure(&w, "triad_gbps", stream_figure(r, r->stream_threads[i], false), 3);
        json_figure(&w, "copy_gbps", stream_figure(r, r->stream_threads[i], true), 3);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "stream_isa");
    json_string(&w, bench_stream_isa());
    json_key(&w, "stream_array_bytes");
    if (r->stream)
        json_int(&w, (long long)bench_stream_array_bytes(r->stream));
    else
        json_null(&w);
    json_key(&w, "stream_runs");
    json_int(&w, r->stream_runs);
    json_key(&w, "allowed_cpus");
    json_int(&w, bench_allowed_cpus());
    json_key(&w, "llc_bytes");
    json_int(&w, (long long)bench_llc_bytes());
    json_key(&w, "plugin_detail");
    json_text_or_null(&w, r->plugin.found ? r->plugin.detail : NULL);
    /* The device's figures: null on the CPU. */
    json_key(&w, "device_detail");
    json_text_or_null(&w, r->on_device ? r->provider_detail : NULL);
    json_figure(&w, "d2d_copy_gbps", r->on_device ? d2d_figure(r) : NAN, 3);
    json_key(&w, "d2d_copy_bytes");
    if (r->on_device)
        json_int(&w, (long long)bench_d2d_bytes(r->d2d));
    else
        json_null(&w);
    json_key(&w, "d2d_runs");
    if (r->on_device)
        json_int(&w, r->d2d_runs);
    else
        json_null(&w);
    json_end_object(&w);

    json_key(&w, "device");
    json_string(&w, fld_device_name(opt->device_type));
    json_key(&w, "provider"); /* the plugin serving the device's memory, as verify says */
    json_string(&w, r->on_device ? r->provider : NULL);
    json_key(&w, "baseline");
    json_string(&w, r->on_device ? "d2d_copy" : "stream_triad");
    json_figure(&w, "baseline_gbps", r->on_device ? d2d_figure(r) : NAN, 3);
    json_key(&w, "reps");
    json_int(&w, opt->reps);
    json_figure(&w, "batch_ms", r->batch_ns * 1e-6, 1);

    json_key(&w, "results");
    json_begin_array(&w);
    for (size_t i = 0; i < r->n_results; i++) {
        const struct bench_result *res = &r->results[i];
        json_begin_object(&w);
        json_key(&w, "op");
        json_string(&w, res->op_name);
        json_key(&w, "impl_id");
        json_string(&w, res->impl);
        json_key(&w, "dtype");
        json_string(&w, tool_dtype_name(res->dtype));
        json_key(&w, "shape");
        json_string(&w, res->json_shape);
        json_key(&w, "threads"); /* of the cpu plugin: null on other devices */
        if (r->on_device)
            json_null(&w);
        else
            json_int(&w, res->threads);
        json_figure(&w, "us", res->us, 4);
        json_figure(&w, "gbps", gbps(res), 3);
        json_figure(&w, "bw_share", bw_share(r, res), 4);
        json_key(&w, "tokens");
        json_int(&w, res->tokens);
        json_key(&w, "residual");
        json_bool(&w, res->residual);
        json_key(&w, "bytes");
        json_int(&w, (long long)res->bytes);
        json_key(&w, "elements");
        json_int(&w, (long long)res->elements);
        json_figure(&w, "gelem_per_s", gelems(res), 4);
        json_figure(&w, "elem_per_cycle", elems_per_cycle(r, res), 4);
        json_key(&w, "calls_per_batch");
        json_int(&w, res->batch);
        json_key(&w, "selected_by_default");
        json_bool(&w, res->selected);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
}
