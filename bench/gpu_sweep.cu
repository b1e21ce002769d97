// SPDX-License-Identifier: Apache-2.0
/*
 * gpu_sweep: times every candidate launch shape of the GPU kernels
 * (plugins/shared/gpu/gpu_launch.h) on the GPU it runs on, as a serving
 * engine sees them: each call captured CALLS times in a CUDA graph and the
 * graph replayed, device time per call (median of the replays). For every
 * case it prints the time of the shape gpu_launch.h chooses beside the
 * fastest candidate, so the table's rows can be checked or changed on
 * measured ground; --json writes every candidate. A closing summary gives,
 * for each op, dtype and regime (decode, between, prefill), each kind of
 * candidate's best against the table's choice (norms: the one-row latency
 * kernel, the weight loaded early or after the reduction, or two passes;
 * activations: 16-, 8- or 4-byte groups; rotary: a token split over blocks
 * or not).
 *
 *   make gpu-sweep          build/bench/gpu_sweep (nvcc)
 *   build/bench/gpu_sweep [--quick] [--json FILE] [--ops norm,fused,act,gelu,rotary]
 *                         [--tokens 1,8,32] [--dtypes bf16,f16,f32]
 *
 * Inputs are uniform in [-2, 2] (weights [0.5, 1.5]); calls whose inputs
 * exceed 32 MiB rotate over two sets, so they stream from HBM rather than
 * the L2. A one-thread kernel in the same kind of graph gives the floor,
 * and a device-to-device copy of 1 GiB the same run's bandwidth. Exit
 * status: 0, or 1 when a launch failed (the case is named).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../plugins/shared/gpu/gpu_kernels.cuh"

namespace
{

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "gpu_sweep: %s: %s\n", #x, cudaGetErrorString(e_));                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

__global__ void fill_uniform(uint16_t *p16, float *p32, int64_t n, uint32_t seed, float lo,
                             float hi, int dtype)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        const float v = lo + (hi - lo) * (float)(h & 0xffffff) / 16777216.0f;
        if (dtype == FLD_GPU_F32)
            p32[i] = v;
        else
            p16[i] = dtype == FLD_GPU_F16 ? fld__gpu_f32_to_f16(v) : fld__gpu_f32_to_bf16(v);
    }
}

__global__ void floor_kernel(int *p)
{
    *p = 1;
}

struct buffer {
    void *p = nullptr;
    int64_t n = 0;
    int dtype = 0;
};

buffer make(int64_t n, int dtype, float lo, float hi, uint32_t seed)
{
    buffer b;
    b.n = n;
    b.dtype = dtype;
    CHECK(cudaMalloc(&b.p, (size_t)n * fld__gpu_elem_size(dtype) + 16));
    fill_uniform<<<1024, 256>>>((uint16_t *)b.p, (float *)b.p, n, seed, lo, hi, dtype);
    CHECK(cudaGetLastError());
    return b;
}

const char *dtype_name(int dt)
{
    return dt == 0 ? "f32" : dt == 1 ? "f16" : "bf16";
}

cudaStream_t stream;
int calls_per_graph = 40, replays = 7;
bool failed = false;

/* Device time per call of launch(set) under graph replay, in microseconds;
   -1 when a launch failed. */
template <typename F> double graph_us(F launch, int sets)
{
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    for (int i = 0; i < 2; i++)
        if (launch(i % sets) != 0)
            return -1;
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    int rc = 0;
    for (int i = 0; i < calls_per_graph && rc == 0; i++)
        rc = launch(i % sets);
    CHECK(cudaStreamEndCapture(stream, &graph));
    if (rc != 0) {
        cudaGraphDestroy(graph);
        return -1;
    }
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaGraphLaunch(exec, stream));
    std::vector<float> t;
    for (int r = 0; r < replays; r++) {
        CHECK(cudaEventRecord(e0, stream));
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaEventRecord(e1, stream));
        CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1000.0f / (float)calls_per_graph);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

FILE *json;

std::string shape_text(const fld__gpu_shape &s)
{
    char b[96];
    snprintf(b, sizeof b, "t%u b%lld y%lld k%d%s%s", s.threads, (long long)s.blocks,
             (long long)s.blocks_y, s.per_thread, s.early_weight ? "w" : "", s.lean ? "l" : "");
    if (s.access_bytes && s.access_bytes != 16)
        snprintf(b + strlen(b), sizeof b - strlen(b), " a%d", s.access_bytes);
    return b;
}

/* The kind of a shape, for the summary: the kernel variant it runs. */
std::string shape_kind(const char *op, const fld__gpu_shape &s)
{
    if (!strcmp(op, "norm") || !strcmp(op, "fused"))
        return s.per_thread == 0 ? "two passes"
               : s.lean          ? "one row"
               : s.early_weight  ? "early weight"
                                 : "weight after";
    if (!strcmp(op, "silu") || !strcmp(op, "gelu"))
        return std::to_string(s.access_bytes ? s.access_bytes : 16) + "-byte groups" +
               (s.lean ? ", lean" : "");
    return s.blocks_y > 1 ? "token split" : "block per token";
}

int sms;

/* Per (op family, regime, kind): log(table / kind's best) summed, cases, cases won. */
struct kind_total {
    double log_ratio = 0;
    int cases = 0, won = 0;
};
std::map<std::string, std::map<std::string, kind_total>> summary;

std::string regime(int64_t rows)
{
    return rows <= sms ? "decode" : rows >= 8 * (int64_t)sms ? "prefill" : "between";
}

/* Times the table's shape and every candidate; prints one line. */
template <typename F>
void run_case(const char *op, int dt, int64_t width, int64_t rows, double bytes, int sets,
              const fld__gpu_shape &table, const std::vector<fld__gpu_shape> &candidates, F launch)
{
    const double table_us = graph_us([&](int i) { return launch(i, &table); }, sets);
    if (table_us < 0) {
        fprintf(stderr, "gpu_sweep: %s %s width %lld rows %lld: the table's shape %s failed\n", op,
                dtype_name(dt), (long long)width, (long long)rows, shape_text(table).c_str());
        failed = true;
        return;
    }
    double best_us = table_us;
    fld__gpu_shape best = table;
    if (json)
        fprintf(json,
                "{\"op\":\"%s\",\"dtype\":\"%s\",\"width\":%lld,\"rows\":%lld,\"bytes\":%.0f,"
                "\"table\":\"%s\",\"table_us\":%.3f,\"candidates\":[",
                op, dtype_name(dt), (long long)width, (long long)rows, bytes,
                shape_text(table).c_str(), table_us);
    bool first = true;
    std::map<std::string, double> kind_best = {{shape_kind(op, table), table_us}};
    for (const fld__gpu_shape &c : candidates) {
        const double us = graph_us([&](int i) { return launch(i, &c); }, sets);
        if (json && us >= 0) {
            fprintf(json, "%s[\"%s\",%.3f]", first ? "" : ",", shape_text(c).c_str(), us);
            first = false;
        }
        if (us < 0)
            continue;
        const std::string kind = shape_kind(op, c);
        if (!kind_best.count(kind) || us < kind_best[kind])
            kind_best[kind] = us;
        if (us < best_us) {
            best_us = us;
            best = c;
        }
    }
    const std::string name = isdigit((unsigned char)op[4]) ? std::string(op, 4) : std::string(op);
    const std::string family = name + " " + dtype_name(dt) + " " + regime(rows);
    for (const auto &kb : kind_best) {
        kind_total &t = summary[family][kb.first];
        t.log_ratio += std::log(table_us / kb.second);
        t.cases++;
        t.won += kb.second <= best_us;
    }
    if (json)
        fprintf(json, "],\"best\":\"%s\",\"best_us\":%.3f}\n", shape_text(best).c_str(), best_us);
    printf("%-7s %-4s %6lld %6lld  table %8.2f us %-22s best %8.2f us %-22s %5.0f GB/s\n", op,
           dtype_name(dt), (long long)width, (long long)rows, table_us, shape_text(table).c_str(),
           best_us, shape_text(best).c_str(), bytes / (table_us * 1e3));
    fflush(stdout);
}

std::vector<fld__gpu_shape> norm_candidates(int64_t rows, int64_t groups)
{
    std::vector<fld__gpu_shape> out;
    for (unsigned t : {64u, 128u, 256u, 512u, 1024u}) {
        const int per = fld__gpu_norm_groups_per_thread(groups, t);
        std::vector<int64_t> grids = {rows};
        if (rows >= 4 * (int64_t)sms)
            for (int m : {2, 4, 8})
                if ((int64_t)sms * m < rows)
                    grids.push_back((int64_t)sms * m);
        for (int64_t g : grids) {
            if (per == 0 || (per == 4 && t > 512)) {
                if (groups <= (int64_t)t * 64)
                    out.push_back({t, g, 1, 0, false, 0, false});
                continue;
            }
            out.push_back({t, g, 1, per, false, 0, false});
            if (per <= 2)
                out.push_back({t, g, 1, per, true, 0, false});
            /* the one-row kernel (1 or 2 groups), at every size */
            if (per <= 2 && g == rows)
                out.push_back({t, g, 1, per, true, 0, true});
        }
    }
    return out;
}

void sweep_norm(bool fused, int dt, int64_t width, int64_t rows)
{
    const int size = dt == 0 ? 4 : 2;
    const int64_t n = rows * width;
    const double bytes = (double)size * (fused ? 4.0 * n : 2.0 * n) + (double)size * width;
    const int sets = bytes > 32.0 * (1 << 20) ? 2 : 1;
    buffer x[2], r[2], o[2];
    buffer w = make(width, dt, 0.5f, 1.5f, 3);
    for (int i = 0; i < sets; i++) {
        x[i] = make(n, dt, -2, 2, 10 + i);
        if (fused)
            r[i] = make(n, dt, -2, 2, 20 + i);
        else
            o[i] = make(n, dt, 0, 0, 30 + i);
    }
    CHECK(cudaDeviceSynchronize());
    const int64_t groups = width / (16 / size);
    auto launch = [&](int i, const fld__gpu_shape *s) {
        fld__gpu_norm_args a = {};
        a.dtype = a.weight_dtype = a.residual_dtype = dt;
        a.x = x[i].p;
        a.out = fused ? x[i].p : o[i].p;
        a.weight = w.p;
        a.residual = fused ? r[i].p : nullptr;
        a.rows = rows;
        a.width = width;
        a.out_stride = a.x_stride = a.residual_stride = width;
        a.eps = 1e-6f;
        return fld_gpu::run_norm_shaped(&a, FLD_GPU_VECTOR, stream, s);
    };
    run_case(fused ? "fused" : "norm", dt, width, rows, bytes, sets,
             fld__gpu_norm_shape(rows, groups, sms, fused), norm_candidates(rows, groups), launch);
    for (int i = 0; i < sets; i++) {
        cudaFree(x[i].p);
        cudaFree(r[i].p);
        cudaFree(o[i].p);
    }
    cudaFree(w.p);
}

/* op: FLD_GPU_SILU_AND_MUL, or FLD_GPU_GELU_AND_MUL (erf: at prefill its
   time is the arithmetic's as much as memory's, so the narrower groups,
   fewer registers per thread, are candidates there too) */
void sweep_act(int op, int dt, int64_t d, int64_t rows)
{
    const int size = dt == 0 ? 4 : 2;
    const double bytes = (double)size * 3.0 * rows * d;
    const int sets = bytes > 32.0 * (1 << 20) ? 2 : 1;
    buffer x[2], o[2];
    for (int i = 0; i < sets; i++) {
        x[i] = make(2 * rows * d, dt, -4, 4, 40 + i);
        o[i] = make(rows * d, dt, 0, 0, 50 + i);
    }
    CHECK(cudaDeviceSynchronize());
    const int64_t groups = d / (16 / size);
    std::vector<fld__gpu_shape> cands;
    for (int access : {16, 8, 4}) {
        if (access != 16 && rows > 512 && op == FLD_GPU_SILU_AND_MUL)
            continue; /* narrower groups: silu's latency regime */
        for (unsigned t : {32u, 64u, 128u, 256u}) {
            const int64_t b = fld__gpu_ceil_div(groups * (16 / access), t);
            cands.push_back({t, b, rows, 0, false, access, false});
            if (rows < 8 * (int64_t)sms) /* the lean kernel: decode and between */
                cands.push_back({t, b, rows, 0, false, access, true});
            if (b >= 4)
                cands.push_back({t, fld__gpu_ceil_div(b, 2), rows, 0, false, access, false});
        }
    }
    auto launch = [&](int i, const fld__gpu_shape *s) {
        fld__gpu_act_args a = {};
        a.op = op;
        a.dtype = dt;
        a.out = o[i].p;
        a.x = x[i].p;
        a.rows = rows;
        a.d = d;
        a.out_stride = d;
        a.x_stride = 2 * d;
        return fld_gpu::run_act_shaped(&a, FLD_GPU_VECTOR, stream, s);
    };
    run_case(op == FLD_GPU_SILU_AND_MUL ? "silu" : "gelu", dt, d, rows, bytes, sets,
             fld__gpu_act_shape(rows, groups, sms), cands, launch);
    for (int i = 0; i < sets; i++) {
        cudaFree(x[i].p);
        cudaFree(o[i].p);
    }
}

void sweep_rotary(int dt, int64_t tokens, int64_t qh, int64_t kh, bool neox)
{
    const int size = dt == 0 ? 4 : 2, hd = 128;
    const int64_t max_pos = 8192;
    const double bytes = (double)size * 2.0 * tokens * (qh + kh) * hd + (double)size * tokens * hd;
    const int sets = bytes > 32.0 * (1 << 20) ? 2 : 1;
    buffer q[2], k[2];
    for (int i = 0; i < sets; i++) {
        q[i] = make(tokens * qh * hd, dt, -1, 1, 60 + i);
        k[i] = make(tokens * kh * hd, dt, -1, 1, 70 + i);
    }
    buffer cache = make(max_pos * hd, dt, -1, 1, 80);
    std::vector<int64_t> pos_host(tokens);
    for (int64_t t = 0; t < tokens; t++)
        pos_host[t] = (t * 2654435761LL) % max_pos;
    int64_t *pos;
    CHECK(cudaMalloc(&pos, tokens * sizeof(int64_t)));
    CHECK(cudaMemcpy(pos, pos_host.data(), tokens * sizeof(int64_t), cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());
    const int64_t units = (qh + kh) * (neox ? hd / 2 / (16 / size) : hd / (16 / size));
    std::vector<fld__gpu_shape> cands;
    for (unsigned t : {64u, 128u, 256u, 512u}) {
        cands.push_back({t, tokens, 1, 0, false, 0, false});
        if (units > t)
            cands.push_back({t, tokens, fld__gpu_ceil_div(units, t), 0, false, 0, false});
    }
    auto launch = [&](int i, const fld__gpu_shape *s) {
        fld__gpu_rotary_args a = {};
        a.dtype = a.cache_dtype = dt;
        a.positions = pos;
        a.query = q[i].p;
        a.key = k[i].p;
        a.tokens = tokens;
        a.head_size = a.rot_dim = hd;
        a.q_heads = qh;
        a.q_token_stride = qh * hd;
        a.q_head_stride = hd;
        a.k_heads = kh;
        a.k_token_stride = kh * hd;
        a.k_head_stride = hd;
        a.cache = cache.p;
        a.cache_stride = hd;
        a.max_pos = max_pos;
        a.is_neox = neox;
        return fld_gpu::run_rotary_shaped(&a, FLD_GPU_VECTOR, stream, s);
    };
    char name[16];
    snprintf(name, sizeof name, "%s%lld", neox ? "neox" : "gptj", (long long)qh);
    run_case(name, dt, (qh + kh) * hd, tokens, bytes, sets,
             fld__gpu_rotary_shape(tokens, units, sms), cands, launch);
    for (int i = 0; i < sets; i++) {
        cudaFree(q[i].p);
        cudaFree(k[i].p);
    }
    cudaFree(cache.p);
    cudaFree(pos);
}

double copy_gbps()
{
    const size_t bytes = (size_t)1 << 30;
    void *a, *b;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMemset(a, 1, bytes));
    const int saved = calls_per_graph;
    calls_per_graph = 4;
    const double us = graph_us(
        [&](int) { return (int)cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream); },
        1);
    calls_per_graph = saved;
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)bytes / (us * 1e3);
}

bool wanted(const char *ops, const char *op)
{
    const size_t n = strlen(op);
    for (const char *p = ops; (p = strstr(p, op)) != nullptr; p += n)
        if ((p == ops || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return true;
    return false;
}

/* Whether every word of a comma-separated --ops list names a family swept. */
bool known_ops(const char *ops)
{
    static const char *const known[] = {"norm", "fused", "act", "gelu", "rotary"};
    for (const char *p = ops;; p++) {
        const size_t n = strcspn(p, ",");
        bool ok = false;
        for (const char *k : known)
            ok = ok || (strlen(k) == n && !strncmp(p, k, n));
        if (!ok)
            return false;
        p += n;
        if (!*p)
            return true;
    }
}

/* A comma-separated list of positive integers; false when it is not one. */
bool parse_tokens(const char *text, std::vector<int64_t> *out)
{
    out->clear();
    for (const char *p = text; *p;) {
        char *end;
        const long long v = strtoll(p, &end, 10);
        if (end == p || v <= 0 || (*end && *end != ','))
            return false;
        out->push_back(v);
        p = *end ? end + 1 : end;
    }
    return !out->empty();
}

/* A comma-separated list of dtype names (dtype_name's); false on another word. */
bool parse_dtypes(const char *text, std::vector<int> *out)
{
    out->clear();
    for (int dt = FLD_GPU_DTYPES - 1; dt >= 0; dt--)
        if (wanted(text, dtype_name(dt)))
            out->push_back(dt);
    size_t words = 1;
    for (const char *p = text; *p; p++)
        words += *p == ',';
    return !out->empty() && out->size() == words;
}

} // namespace

int main(int argc, char **argv)
{
    const char *ops = "norm,fused,act,gelu,rotary", *json_path = nullptr;
    const char *tokens_arg = nullptr, *dtypes_arg = nullptr;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            tokens_arg = argv[++i];
        else if (!strcmp(argv[i], "--dtypes") && i + 1 < argc)
            dtypes_arg = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json_path = argv[++i];
        else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
            ops = argv[++i];
        else {
            fprintf(stderr,
                    "usage: gpu_sweep [--quick] [--json FILE] [--ops norm,fused,act,gelu,rotary]"
                    " [--tokens 1,8,32] [--dtypes bf16,f16,f32]\n");
            return 2;
        }
    }
    std::vector<int64_t> tokens = quick ? std::vector<int64_t>{1, 32, 4096}
                                        : std::vector<int64_t>{1, 8, 32, 128, 512, 4096, 16384};
    std::vector<int> dtypes = quick ? std::vector<int>{2} : std::vector<int>{2, 1, 0};
    if (tokens_arg && !parse_tokens(tokens_arg, &tokens)) {
        fprintf(stderr, "gpu_sweep: --tokens %s: expected positive integers separated by commas\n",
                tokens_arg);
        return 2;
    }
    if (!known_ops(ops)) {
        fprintf(stderr,
                "gpu_sweep: --ops %s: expected norm, fused, act, gelu or rotary, separated "
                "by commas\n",
                ops);
        return 2;
    }
    if (dtypes_arg && !parse_dtypes(dtypes_arg, &dtypes)) {
        fprintf(stderr, "gpu_sweep: --dtypes %s: expected bf16, f16 or f32, separated by commas\n",
                dtypes_arg);
        return 2;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    sms = fld__gpu_sm_count();
    if (json_path && !(json = fopen(json_path, "w"))) {
        perror(json_path);
        return 2;
    }
    int *flag;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    const double floor_us = graph_us(
        [&](int) {
            floor_kernel<<<1, 1, 0, stream>>>(flag);
            return (int)cudaGetLastError();
        },
        1);
    const double copy = copy_gbps();
    printf("device %s, %d SMs, floor %.2f us per kernel, copy %.0f GB/s\n", prop.name, sms,
           floor_us, copy);
    if (json)
        fprintf(json, "{\"device\":\"%s\",\"sms\":%d,\"floor_us\":%.3f,\"copy_gbps\":%.1f}\n",
                prop.name, sms, floor_us, copy);
    for (int dt : dtypes) {
        for (bool fused : {false, true}) {
            if (!wanted(ops, fused ? "fused" : "norm"))
                continue;
            for (int64_t h : {2048, 4096, 8192})
                for (int64_t t : tokens)
                    if (!(dt == 0 && h != 4096))
                        sweep_norm(fused, dt, h, t);
        }
        for (int op : {FLD_GPU_SILU_AND_MUL, FLD_GPU_GELU_AND_MUL})
            if (wanted(ops, op == FLD_GPU_SILU_AND_MUL ? "act" : "gelu"))
                for (int64_t t : tokens)
                    if (t <= 4096)
                        sweep_act(op, dt, 14336, t);
        if (wanted(ops, "rotary"))
            for (bool neox : {true, false})
                for (int64_t qh : {32, 64})
                    for (int64_t t : tokens)
                        if (t <= 4096 && !(dt == 0 && (qh != 32 || !neox)))
                            sweep_rotary(dt, t, qh, 8, neox);
    }
    if (json)
        fclose(json);
    printf("\nsummary: each kind's best candidate against the table's choice, geometric mean of "
           "table / best (above 1: that kind is faster), and the cases where it was the fastest\n");
    for (const auto &f : summary) {
        printf("  %-20s", f.first.c_str());
        for (const auto &k : f.second)
            printf("  %s %.3fx (%d of %d)", k.first.c_str(),
                   std::exp(k.second.log_ratio / k.second.cases), k.second.won, k.second.cases);
        printf("\n");
    }
    return failed ? 1 : 0;
}
