#include "engine/quant_cache.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

namespace soartune::engine {

namespace {

constexpr char kMagic[] = "SOARTUNEQ1";

template <typename M, typename F>
void each_linear(M& w, F f) {
  for (auto& l : w.layers)
    for (auto* p : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_out_gate, &l.w_gate, &l.w_up, &l.w_down}) f(*p);
  f(w.lm_head);
}

}  // namespace

std::string quantized_cache_file(const std::string& dir, const std::string& key) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx.q", static_cast<unsigned long long>(h));
  return (std::filesystem::path(dir) / buf).string();
}

Status save_quantized(const ModelWeights& w, const std::string& path, const std::string& key) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // Written aside and renamed, so a concurrent reader never sees half a file.
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary);
  if (!out) return Status::Internal("quantised-weights cache: cannot write " + tmp);
  auto put = [&](int32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  out.write(kMagic, sizeof kMagic - 1);
  put(static_cast<int32_t>(key.size()));
  out.write(key.data(), static_cast<std::streamsize>(key.size()));
  each_linear(w, [&](const QuantizedLinear& l) {
    put(l.bits);
    put(l.group_size);
    put(l.out);
    put(l.in);
    if (l.bits < 16) {
      out.write(reinterpret_cast<const char*>(l.q.data()), static_cast<std::streamsize>(l.q.size()));
      out.write(reinterpret_cast<const char*>(l.scales.data()), static_cast<std::streamsize>(l.scales.size() * 4));
    }
  });
  out.close();
  if (!out) return Status::Internal("quantised-weights cache: write failed: " + tmp);
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::Internal("quantised-weights cache: " + ec.message());
  return Status::Ok();
}

Result<bool> load_quantized(ModelWeights& w, const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  char magic[sizeof kMagic - 1];
  in.read(magic, sizeof magic);
  auto get = [&]() {
    int32_t v = -1;
    in.read(reinterpret_cast<char*>(&v), 4);
    return v;
  };
  if (!in || std::string(magic, sizeof magic) != kMagic) return false;
  const int32_t n = get();
  if (n < 0 || n > (1 << 20)) return false;
  std::string stored(static_cast<std::size_t>(n), '\0');
  in.read(stored.data(), n);
  if (!in || stored != key) return false;
  // Read into copies first: a short or mismatched file leaves `w` as it was.
  std::vector<QuantizedLinear> got;
  bool ok = true;
  each_linear(w, [&](const QuantizedLinear& l) {
    if (!ok) return;
    QuantizedLinear q;
    q.bits = get();
    q.group_size = get();
    q.out = get();
    q.in = get();
    // A file that is not what save_quantized wrote (a damaged disk, a hand-edited cache) is a miss, never
    // weights the backends would index out of bounds or decode wrongly: widths, bits and groups as the model's
    // linear allows, codes within their width, scales finite.
    if (!in || q.out != l.out || q.in != l.in || (q.bits != 16 && q.bits != 8 && q.bits != 4) || q.group_size < 0 ||
        (q.group_size > 0 && q.in % q.group_size != 0)) {
      ok = false;
      return;
    }
    if (q.bits < 16) {
      q.q.resize(static_cast<std::size_t>(q.out) * q.in);
      q.scales.resize(static_cast<std::size_t>(q.out) * q.groups_per_row());
      in.read(reinterpret_cast<char*>(q.q.data()), static_cast<std::streamsize>(q.q.size()));
      in.read(reinterpret_cast<char*>(q.scales.data()), static_cast<std::streamsize>(q.scales.size() * 4));
      const int lo = -(1 << (q.bits - 1)), hi = (1 << (q.bits - 1)) - 1;
      for (int8_t c : q.q)
        if (c < lo || c > hi) ok = false;
      for (float s : q.scales)
        if (!std::isfinite(s)) ok = false;
    }
    ok = ok && static_cast<bool>(in);
    got.push_back(std::move(q));
  });
  if (!ok) return false;
  std::size_t k = 0;
  each_linear(w, [&](QuantizedLinear& l) {
    QuantizedLinear& q = got[k++];
    if (q.bits == 16) return;
    l.bits = q.bits;
    l.group_size = q.group_size;
    l.q = std::move(q.q);
    l.scales = std::move(q.scales);
    l.w16.clear();
    l.w16.shrink_to_fit();
  });
  return true;
}

}  // namespace soartune::engine
