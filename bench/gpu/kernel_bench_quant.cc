// The quantized products' rates (tachyon_kernel_bench --only quant): the backend's
// linear() on int4 g128 (asymmetric), int8 per channel (symmetric) and fp8 per channel
// weights against the same products on bf16 weights, at the model's four layer products
// (qkv, o, gate_up, down), at the given m. Each weight is quantized once on the host and
// uploaded in enough copies that one pass over them is 4x the L2, so the weights stream
// from memory. Bandwidth counts the bytes the product must move (packed weights, their
// scales, x and y); the device's copy rate is measured first, as the ceiling.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/quant.h"
#include "kernel_bench.h"

namespace tachyon::bench {
namespace {

// A device-to-device copy of 1 GiB, in TB/s counting the bytes read and written.
double copy_rate(cuda::CudaBackend& be, int reps) {
  const size_t bytes = size_t{1} << 30;
  Tensor a = be.allocator().alloc_bytes(bytes), b = be.allocator().alloc_bytes(bytes);
  const double t = time_calls(be, reps, [&](int) {
    TACHYON_CUDA_CHECK(
        cudaMemcpyAsync(b.raw(), a.raw(), bytes, cudaMemcpyDeviceToDevice, be.stream()));
  });
  return 2.0 * static_cast<double>(bytes) / t / 1e12;
}

struct Scheme {
  const char* name;
  std::shared_ptr<QuantizedMatrix> (*make)(const Tensor& w);
};

}  // namespace

void quant_rates(const Dims& d, const std::vector<int64_t>& ms, int reps) {
  CudaBackendOptions o;
  cuda::CudaBackend be(o);
  std::printf("\ndevice copy: %.2f TB/s (read + write)\n", copy_rate(be, reps));
  std::printf("RESULT copy_tbs %.3f\n", copy_rate(be, reps));
  const Shape5 shapes[] = {{"qkv", (d.heads + 2 * d.kv_heads) * d.head_dim, d.hidden},
                           {"o", d.hidden, d.heads * d.head_dim},
                           {"gate_up", 2 * d.inter, d.hidden},
                           {"down", d.hidden, d.inter}};
  const Scheme schemes[] = {
      {"int4_g128", [](const Tensor& w) { return quantize_int(w, 4, 128, false); }},
      {"int8_chan", [](const Tensor& w) { return quantize_int(w, 8, w.dim(1), true); }},
      {"fp8_chan", [](const Tensor& w) { return quantize_fp8(w, 1, w.dim(1)); }},
  };
  std::printf("\n%-8s %6s %7s %6s %-10s %10s %9s %9s %8s\n", "quant", "m", "n", "k", "weights",
              "us", "TB/s", "TFLOP/s", "vs bf16");
  for (const Shape5& s : shapes) {
    const std::vector<uint16_t> hw = random_bf16(s.n * s.k, 11);
    Tensor host = Tensor::empty({s.n, s.k}, DType::kBF16);
    std::memcpy(host.raw(), hw.data(), hw.size() * 2);
    // bf16 weights and each scheme's, in copies streaming from memory.
    auto copies_for = [](double bytes) {
      return static_cast<int>(std::clamp<double>(std::ceil(256e6 / bytes), 1, 16));
    };
    struct Variant {
      std::string name;
      std::vector<Tensor> w;
      double wbytes;
    };
    std::vector<Variant> variants;
    {
      Variant v{"bf16", {}, 2.0 * s.n * s.k};
      for (int c = 0, nc = copies_for(v.wbytes); c < nc; ++c)
        v.w.push_back(be.prepare_linear_weight(host));
      variants.push_back(std::move(v));
    }
    for (const Scheme& sc : schemes) {
      const std::shared_ptr<const QuantizedMatrix> m = sc.make(host);
      Variant v{sc.name, {}, static_cast<double>(m->nbytes())};
      for (int c = 0, nc = copies_for(v.wbytes); c < nc; ++c)
        v.w.push_back(be.prepare_linear_weight(quantized_view(m)));
      variants.push_back(std::move(v));
    }
    for (int64_t m : ms) {
      Tensor xt = upload_random(be, {m, s.k}, 7 + m);
      Tensor yt = be.alloc({m, s.n}, DType::kBF16);
      const double flops = 2.0 * m * s.n * s.k;
      double base = 0;
      for (const Variant& v : variants) {
        const int nc = static_cast<int>(v.w.size());
        const double t = time_calls(be, reps, [&](int i) {
          be.linear(xt, v.w[static_cast<size_t>(i % nc)], Tensor(), yt, 0, Activation::kIdentity);
        });
        if (v.name == "bf16") base = t;
        const double bytes = v.wbytes + 2.0 * m * s.k + 2.0 * m * s.n;
        std::printf("%-8s %6lld %7lld %6lld %-10s %10.2f %9.2f %9.1f %7.2fx\n", s.name,
                    static_cast<long long>(m), static_cast<long long>(s.n),
                    static_cast<long long>(s.k), v.name.c_str(), t * 1e6, bytes / t / 1e12,
                    flops / t / 1e12, base / t);
        std::printf("RESULT quant_%s_m%lld_%s_us %.2f tbs %.3f tflops %.1f speedup %.3f\n", s.name,
                    static_cast<long long>(m), v.name.c_str(), t * 1e6, bytes / t / 1e12,
                    flops / t / 1e12, base / t);
      }
    }
  }
}

}  // namespace tachyon::bench
