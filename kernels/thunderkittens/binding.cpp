// pybind11 entry points of titankit's ThunderKittens extension (built by build.py through
// torch.utils.cpp_extension). Host C++ only: the kernels live in the .cu files behind tk_kernels.h.
// Python allocates every output and workspace (torch's caching allocator) and passes the CUDA stream
// as an integer, so this file needs no CUDA-specific torch headers and nothing here synchronises.
#include <torch/extension.h>

#include <optional>
#include <string>
#include <tuple>

#include "tk_kernels.h"

namespace {

cudaStream_t as_stream(int64_t s) { return reinterpret_cast<cudaStream_t>(s); }

// TMA needs 16-byte aligned bases and dense rows; the Python wrappers guarantee both, this is the
// last line of defence against a silent wrong answer.
void check(const torch::Tensor& t, const char* name, at::ScalarType dtype) {
    TORCH_CHECK(t.is_cuda(), "titankit thunderkittens: ", name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == dtype, "titankit thunderkittens: ", name, " must be ",
                c10::toString(dtype), ", got ", c10::toString(t.scalar_type()));
    TORCH_CHECK(t.is_contiguous(), "titankit thunderkittens: ", name, " must be contiguous");
    TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, "titankit thunderkittens: ",
                name, " must be 16-byte aligned");
}

int dim(const torch::Tensor& t, int i) { return static_cast<int>(t.size(i)); }

void attn_fwd(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
              torch::Tensor& out, torch::Tensor& lse, bool causal, int64_t stream) {
    for (auto [t, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}})
        check(*t, n, at::kBFloat16);
    check(lse, "lse", at::kFloat);
    TORCH_CHECK(q.dim() == 4 && k.sizes() == v.sizes() && out.sizes() == q.sizes(),
                "titankit thunderkittens: attention shapes q (B,S,Hq,D), k/v (B,S,Hkv,D)");
    titankit_tk::attn_fwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                          lse.data_ptr<float>(), dim(q, 0), dim(q, 1), dim(k, 1), dim(q, 2),
                          dim(k, 2), dim(q, 3), causal, as_stream(stream));
}

void attn_bwd(const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k,
              const torch::Tensor& v, const torch::Tensor& out, const torch::Tensor& lse,
              const std::optional<torch::Tensor>& dlse, torch::Tensor& delta, torch::Tensor& lse2,
              torch::Tensor& dq_acc, const std::optional<torch::Tensor>& dkv_acc,
              const std::optional<torch::Tensor>& locks, torch::Tensor& dq, torch::Tensor& dk,
              torch::Tensor& dv, bool causal, int64_t stream) {
    for (auto [t, n] : {std::pair{&dout, "dout"}, {&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"},
                        {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}})
        check(*t, n, at::kBFloat16);
    for (auto [t, n] : {std::pair{&lse, "lse"}, {&delta, "delta"}, {&lse2, "lse2"},
                        {&dq_acc, "dq_acc"}})
        check(*t, n, at::kFloat);
    if (dlse) check(*dlse, "dlse", at::kFloat);
    if (locks) {
        check(*locks, "locks", at::kInt);
        TORCH_CHECK(locks->numel() == titankit_tk::attn_bwd_lock_count(dim(q, 0), dim(q, 1),
                                                                       dim(q, 2)),
                    "titankit thunderkittens: locks must hold attn_bwd_lock_count(...) ints");
    }
    if (dkv_acc) {
        check(*dkv_acc, "dkv_acc", at::kFloat);
        // Deterministic mode (locks given): one slice per CTA sharing a key block.
        const int slices =
            locks ? titankit_tk::attn_bwd_kv_split(dim(q, 0), dim(q, 2), dim(k, 2), dim(k, 1)) : 1;
        TORCH_CHECK(dkv_acc->numel() == 2 * slices * k.numel(),
                    "titankit thunderkittens: dkv_acc must hold 2 x k.numel() floats (times "
                    "attn_bwd_kv_split(...) with locks)");
    }
    const int sp = titankit_tk::attn_bwd_padded_len(dim(q, 1));
    TORCH_CHECK(delta.numel() == q.size(0) * q.size(2) * sp && lse2.numel() == delta.numel() &&
                    dq_acc.numel() == q.size(0) * q.size(2) * sp * q.size(3),
                "titankit thunderkittens: attention backward workspace has the wrong size");
    titankit_tk::attn_bwd(dout.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                          out.data_ptr(), lse.data_ptr<float>(),
                          dlse ? dlse->data_ptr<float>() : nullptr, delta.data_ptr<float>(),
                          lse2.data_ptr<float>(), dq_acc.data_ptr<float>(),
                          dkv_acc ? dkv_acc->data_ptr<float>() : nullptr,
                          locks ? locks->data_ptr<int>() : nullptr, dq.data_ptr(),
                          dk.data_ptr(), dv.data_ptr(), dim(q, 0), dim(q, 1), dim(k, 1),
                          dim(q, 2), dim(k, 2), dim(q, 3), causal, as_stream(stream));
}

std::tuple<int64_t, int64_t> fp8_gemm_rowwise_workspace(int64_t m, int64_t n, int64_t k) {
    const auto ws = titankit_tk::fp8_gemm_rowwise_workspace(static_cast<int>(m),
                                                            static_cast<int>(n),
                                                            static_cast<int>(k));
    return {ws.partials, ws.flags};
}

std::tuple<int64_t, int64_t> fp8_gemm_rowwise_plan(int64_t m, int64_t n, int64_t k) {
    const auto p = titankit_tk::fp8_gemm_rowwise_plan(static_cast<int>(m), static_cast<int>(n),
                                                      static_cast<int>(k));
    return {p.grid, p.sk_tiles};
}

void fp8_gemm_rowwise(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& scale_a,
                      const torch::Tensor& scale_b, torch::Tensor& c,
                      const std::optional<torch::Tensor>& partials,
                      const std::optional<torch::Tensor>& flags, int64_t stream) {
    check(a, "a", at::kFloat8_e4m3fn);
    check(b, "b", at::kFloat8_e4m3fn);
    check(scale_a, "scale_a", at::kFloat);
    check(scale_b, "scale_b", at::kFloat);
    check(c, "c", at::kBFloat16);
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1),
                "titankit thunderkittens: fp8 GEMM needs a (M, K) and b (N, K)");
    // Tensorwise: one scale each. Rowwise: M and N of them (a lone M == 1 row scale is both).
    const bool tensorwise = scale_a.numel() == 1 && scale_b.numel() == 1;
    TORCH_CHECK((tensorwise || (scale_a.numel() == a.size(0) && scale_b.numel() == b.size(0))) &&
                    c.size(0) == a.size(0) && c.size(1) == b.size(0),
                "titankit thunderkittens: fp8 GEMM scales must be one element each or (M,) and (N,), "
                "and c (M, N)");
    // The stream-K workspace: a kernel that finds it short would write past its end.
    const auto ws = titankit_tk::fp8_gemm_rowwise_workspace(dim(a, 0), dim(b, 0), dim(a, 1));
    if (partials) check(*partials, "partials", at::kFloat);
    if (flags) check(*flags, "flags", at::kInt);
    TORCH_CHECK(ws.partials == 0 || (partials && flags && partials->numel() >= ws.partials &&
                                     flags->numel() >= ws.flags),
                "titankit thunderkittens: fp8 GEMM stream-K workspace missing or too small");
    titankit_tk::fp8_gemm_rowwise(a.data_ptr(), b.data_ptr(), scale_a.data_ptr<float>(),
                                  scale_b.data_ptr<float>(), tensorwise, c.data_ptr(), dim(a, 0),
                                  dim(b, 0), dim(a, 1),
                                  partials ? partials->data_ptr<float>() : nullptr,
                                  flags ? flags->data_ptr<int>() : nullptr, as_stream(stream));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "titankit ThunderKittens kernels (sm_90a)";
    m.def("attn_fwd", &attn_fwd, "attention forward into (out, lse)");
    m.def("attn_bwd", &attn_bwd, "attention backward into (dq, dk, dv)");
    m.def("attn_bwd_padded_len", &titankit_tk::attn_bwd_padded_len,
          "length of the backward's per-row workspace for Sq queries");
    m.def("attn_bwd_kv_split", &titankit_tk::attn_bwd_kv_split,
          "CTAs per (KV head, key block) of the backward; > 1 needs the dkv_acc workspace");
    m.def("attn_bwd_lock_count", &titankit_tk::attn_bwd_lock_count,
          "int32 counters of the deterministic backward's locks workspace");
    m.def("fp8_gemm_rowwise_plan", &fp8_gemm_rowwise_plan,
          "(CTAs, stream-K tiles) the fp8 GEMM launches for (M, N, K) on the current device");
    m.def("fp8_gemm_rowwise_workspace", &fp8_gemm_rowwise_workspace,
          "(fp32 partials, int32 flags) element counts of the fp8 GEMM's stream-K workspace");
    m.def("fp8_gemm_rowwise", &fp8_gemm_rowwise,
          "C = (A @ B^T) * scale_a * scale_b in bf16 (partials, flags: the stream-K workspace)");
}
