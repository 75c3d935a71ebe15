// The lightning-attention kernels (kernels/lightning.cuh) against their CPU twins (kernels/lightning_ref.h) on
// fresh random inputs, outputs poisoned: q/k norm + RoPE in place; the recurrence and the chunked prefill in
// mixed batches (prefill and decode sequences, resets at start_pos 0, carried states, GQA) over several steps,
// every chunk size, fp32 and bf16 states, both prefill forms (tensor cores, CUDA cores; and kAuto on rows the
// tensor-core form cannot read); decode-only steps at batch 1, 8 and 64; the output norm + gate at widths with
// tails and at 1 to 64 rows; the q/k rotation and a step launched back to back as the model launches them;
// the can_implement messages.
//
// Tolerances, as ||gpu - twin|| / ||twin||: outputs and fp32 states 1e-4 (the same fp32 inputs; only the
// order of fp32 sums differs from the twin's fp64 ones; the tensor-core form's bf16 hi + lo operands are exact
// to 2^-16 of each value, 1.5e-5 of it); with a bf16 state, states 1e-3 and outputs 5e-4: the GPU and the twin
// round the same fp32 sums, so they differ only where a sum lands within its fp32 error of a bf16 rounding
// boundary (one bf16 step, 2^-8, on a few elements). A phase-by-phase CPU port of the three kernels met the twin
// to at most 1.9e-4 (states) and 1.1e-4 (outputs) over 48 random mixed steps of these shapes; rounding the
// state only at the end of a step instead of after every chunk gives 2.0e-3 to 2.6e-3 (states) and a decode
// output read from the rounded instead of the fp32 state 1.5e-3 (outputs), both caught. bf16 outputs of the
// fused ops 1e-2 (their final bf16 rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/lightning.cuh"
#include "kernels/lightning_ref.h"
#include "tests/kernels/kernel_test_util.h"

namespace soartune::kernels {
namespace {

using test::Dev;

std::vector<float> bf16_values(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
  return f;
}

// MiniCPM-SALA's decays: minus the ALiBi slopes 2^(-8 (i + 1) / heads).
std::vector<float> alibi_log_decay(int heads) {
  std::vector<float> g(heads);
  for (int i = 0; i < heads; ++i) g[i] = -std::pow(2.f, -8.f * float(i + 1) / float(heads));
  return g;
}

// q or k RMSNorm weights, near 1.
std::vector<float> norm_weights(std::mt19937_64& rng, int d) {
  std::uniform_real_distribution<float> u(0.75f, 1.25f);
  std::vector<float> w(d);
  for (auto& x : w) x = u(rng);
  return w;
}

struct Shape {
  int heads, kv_heads, d;
};

struct Seq {
  int tokens, start_pos, slot;
};

// Per-slot states on the device (in the state dtype) and in the twin (fp32 holding the same values).
struct States {
  LightningStateDtype dtype;
  int slots;
  size_t elems;
  std::vector<float> twin;
  Dev dev;
  States(LightningStateDtype dt, int n_slots, const Shape& sh, std::mt19937_64& rng)
      : dtype(dt), slots(n_slots), elems(size_t(n_slots) * sh.heads * sh.d * sh.d),
        dev(elems * lightning_state_bytes(dt)) {
    // A nonzero start: a sequence that does not reset must carry it, one that does must drop it.
    std::vector<uint16_t> bits;
    test::random_bf16(rng, elems, 2.f, &bits, &twin);
    if (dt == LightningStateDtype::kBf16) dev.upload(bits);
    else dev.upload(twin);
  }
  std::vector<float> device_values() const {
    if (dtype == LightningStateDtype::kBf16) return bf16_values(dev.download<uint16_t>(elems));
    return dev.download<float>(elems);
  }
};

const char* dtype_name(LightningStateDtype dt) { return dt == LightningStateDtype::kFp32 ? "fp32" : "bf16"; }

const char* form_name(LightningPrefillForm f) {
  return f == LightningPrefillForm::kAuto ? "auto" : f == LightningPrefillForm::kTensorCores ? "tensor cores" : "cuda cores";
}

// How a step is run: the prefill form, and the qkv row padding (8 keeps rows 16-byte aligned; an odd one sends
// kAuto to the CUDA-core form).
struct StepForm {
  LightningPrefillForm form = LightningPrefillForm::kTensorCores;
  int row_pad = 8;
};

// One step of `seqs` through lightning_run and the twin; compares the outputs and every slot's state.
void check_step(const Shape& sh, const std::vector<Seq>& seqs, int chunk, const StepForm& sf, States* st,
                std::mt19937_64& rng) {
  const int width = (sh.heads + 2 * sh.kv_heads) * sh.d, stride = width + sf.row_pad;
  std::vector<int32_t> offsets = {0}, starts, slots;
  int max_tokens = 1;
  for (const Seq& s : seqs) {
    offsets.push_back(offsets.back() + s.tokens);
    starts.push_back(s.start_pos), slots.push_back(s.slot);
    max_tokens = std::max(max_tokens, s.tokens);
  }
  const int T = offsets.back(), B = int(seqs.size()), out_w = sh.heads * sh.d;
  std::vector<uint16_t> bits;
  std::vector<float> qkv;
  test::random_bf16(rng, size_t(T) * stride, 1.f, &bits, &qkv);
  const auto g = alibi_log_decay(sh.heads);
  const float scale = 1.f / std::sqrt(float(sh.d));
  Dev dqkv(bits.size() * 2), dout(size_t(T) * out_w * 4), doff(offsets.size() * 4), dstart(B * 4), dslot(B * 4),
      dg(g.size() * 4);
  dqkv.upload(bits), doff.upload(offsets), dstart.upload(starts), dslot.upload(slots), dg.upload(g);
  dout.poison();
  LightningArgs a;
  a.qkv = dqkv.p, a.row_stride = stride, a.out = dout.as<float>(), a.state = st->dev.p, a.state_dtype = st->dtype;
  a.slots = st->slots, a.q_offsets = doff.as<int32_t>(), a.start_pos = dstart.as<int32_t>();
  a.seq_slots = dslot.as<int32_t>(), a.log_decay = dg.as<float>(), a.scale = scale, a.batch = B;
  a.max_tokens = max_tokens, a.chunk = chunk, a.heads = sh.heads, a.kv_heads = sh.kv_heads, a.head_dim = sh.d;
  a.prefill_form = sf.form;
  ASSERT_EQ(lightning_can_implement(a), "");
  ASSERT_EQ(lightning_workspace_bytes(T, B, sh.heads, sh.d, chunk), 0u);
  KT_CUDA(lightning_run(a, nullptr));
  KT_CUDA(cudaDeviceSynchronize());

  std::vector<float> ref(size_t(T) * out_w, NAN);
  LightningRefArgs r;
  r.qkv = qkv.data(), r.row_stride = stride, r.out = ref.data(), r.state = st->twin.data();
  r.bf16_state = st->dtype == LightningStateDtype::kBf16, r.q_offsets = offsets.data(), r.start_pos = starts.data();
  r.seq_slots = slots.data(), r.log_decay = g.data(), r.scale = scale, r.batch = B, r.chunk = chunk;
  r.heads = sh.heads, r.kv_heads = sh.kv_heads, r.head_dim = sh.d;
  lightning_ref(r);

  const bool bf16_state = st->dtype == LightningStateDtype::kBf16;
  const double out_tol = bf16_state ? 5e-4 : 1e-4, state_tol = bf16_state ? 1e-3 : 1e-4;
  const auto out = dout.download<float>(ref.size());
  for (int s = 0; s < B; ++s) {
    const std::vector<float> o(out.begin() + int64_t(offsets[s]) * out_w, out.begin() + int64_t(offsets[s + 1]) * out_w);
    const std::vector<float> e(ref.begin() + int64_t(offsets[s]) * out_w, ref.begin() + int64_t(offsets[s + 1]) * out_w);
    EXPECT_LT(test::normalized_error(o, e), out_tol) << "output of sequence " << s << " (" << seqs[s].tokens
                                                       << " tokens, start_pos " << seqs[s].start_pos << ")";
  }
  const auto dev_state = st->device_values();
  const size_t per_slot = size_t(sh.heads) * sh.d * sh.d;
  for (int slot = 0; slot < st->slots; ++slot) {
    const std::vector<float> o(dev_state.begin() + slot * per_slot, dev_state.begin() + (slot + 1) * per_slot);
    const std::vector<float> e(st->twin.begin() + slot * per_slot, st->twin.begin() + (slot + 1) * per_slot);
    const bool used = std::any_of(seqs.begin(), seqs.end(), [&](const Seq& s) { return s.slot == slot && s.tokens > 0; });
    if (used) {
      EXPECT_LT(test::normalized_error(o, e), state_tol) << "state of slot " << slot;
    } else {
      size_t changed = 0;
      for (size_t i = 0; i < o.size(); ++i) changed += o[i] != e[i];
      EXPECT_EQ(changed, 0u) << "values changed in slot " << slot << ", which no sequence of the step uses";
    }
  }
  // Carry on from the twin's state, so that later steps compare one step's kernels, not accumulated drift.
  if (st->dtype == LightningStateDtype::kBf16) {
    std::vector<uint16_t> b(st->elems);
    for (size_t i = 0; i < b.size(); ++i) b[i] = f32_to_bf16(st->twin[i]);
    st->dev.upload(b);
  } else {
    st->dev.upload(st->twin);
  }
}

// A mixed step (a long prefill from scratch into a slot holding garbage, a decode carrying its state, a
// prefill continuing a carried state, a decode at position 0), then three decode-only steps of all four.
void mixed_batch_then_decode(const Shape& sh, int chunk, LightningStateDtype dt, int long_tokens,
                             const StepForm& sf = {}) {
  SCOPED_TRACE("heads " + std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads) + " d " + std::to_string(sh.d) +
               " chunk " + std::to_string(chunk) + " state " + dtype_name(dt) + " prefill " + form_name(sf.form) +
               " row pad " + std::to_string(sf.row_pad));
  std::mt19937_64 rng(test::new_seed());
  States st(dt, 6, sh, rng);
  std::vector<Seq> seqs = {{long_tokens, 0, 3}, {1, 77, 0}, {chunk + 21, 300, 5}, {1, 0, 1}};
  check_step(sh, seqs, chunk, sf, &st, rng);
  for (int step = 0; step < 3; ++step) {
    for (Seq& s : seqs) s.start_pos += s.tokens, s.tokens = 1;
    check_step(sh, seqs, chunk, sf, &st, rng);
  }
}

TEST(Lightning, TinySalaShapeEveryChunkSizeBothStateDtypes) {
  KT_SKIP_WITHOUT_GPU("lightning attention kernels");
  for (const LightningStateDtype dt : {LightningStateDtype::kFp32, LightningStateDtype::kBf16})
    for (const int chunk : {16, 32, 64, 128, 256})
      for (const auto form : {LightningPrefillForm::kTensorCores, LightningPrefillForm::kCudaCores})
        mixed_batch_then_decode({4, 4, 64}, chunk, dt, 3 * chunk + 5, {form, 8});
}

TEST(Lightning, AutoTakesCudaCoresOnRowsTensorCoresCannotRead) {
  KT_SKIP_WITHOUT_GPU("lightning attention kernels");
  // Odd row padding: rows are not 16-byte aligned, so kAuto runs the CUDA-core form (and must be right).
  mixed_batch_then_decode({4, 4, 64}, 64, LightningStateDtype::kFp32, 200, {LightningPrefillForm::kAuto, 3});
  mixed_batch_then_decode({8, 2, 128}, 32, LightningStateDtype::kBf16, 100, {LightningPrefillForm::kAuto, 3});
}

TEST(Lightning, GroupedKvHeadsAtHeadDim128) {
  KT_SKIP_WITHOUT_GPU("lightning attention kernels");
  for (const LightningStateDtype dt : {LightningStateDtype::kFp32, LightningStateDtype::kBf16})
    for (const int chunk : {32, 64, 256})
      for (const auto form : {LightningPrefillForm::kTensorCores, LightningPrefillForm::kCudaCores})
        mixed_batch_then_decode({8, 2, 128}, chunk, dt, 2 * chunk + 70, {form, 8});
}

// Steps at the edge between the decode kernel (one token) and the chunked prefill: two- and three-token prefills
// from scratch and continuing a carried state, beside a one-token prompt, then decode steps of all four.
TEST(Lightning, TwoAndThreeTokenPrefillsBesideAOneTokenPrompt) {
  KT_SKIP_WITHOUT_GPU("lightning attention kernels");
  for (const LightningStateDtype dt : {LightningStateDtype::kFp32, LightningStateDtype::kBf16})
    for (const auto form : {LightningPrefillForm::kTensorCores, LightningPrefillForm::kCudaCores}) {
      const Shape sh{4, 4, 64};
      SCOPED_TRACE(std::string("state ") + dtype_name(dt) + " prefill " + form_name(form));
      std::mt19937_64 rng(test::new_seed());
      States st(dt, 4, sh, rng);
      std::vector<Seq> seqs = {{2, 0, 0}, {2, 40, 1}, {3, 17, 2}, {1, 0, 3}};
      check_step(sh, seqs, 16, {form, 8}, &st, rng);
      for (int step = 0; step < 2; ++step) {
        for (Seq& s : seqs) s.start_pos += s.tokens, s.tokens = 1;
        check_step(sh, seqs, 16, {form, 8}, &st, rng);
      }
    }
}

TEST(Lightning, ReleaseShapeLongPrefillThenDecode) {
  KT_SKIP_WITHOUT_GPU("lightning attention kernels");
  // MiniCPM-SALA's lightning layers: 32 heads of 128, as many kv heads.
  for (const auto form : {LightningPrefillForm::kAuto, LightningPrefillForm::kCudaCores}) {
    mixed_batch_then_decode({32, 32, 128}, 64, LightningStateDtype::kFp32, 700, {form, 8});
    mixed_batch_then_decode({32, 32, 128}, 128, LightningStateDtype::kBf16, 700, {form, 8});
  }
}

// Decode-only steps at the batches a server runs (1, 8, 64), both state dtypes: every third sequence resets its
// slot (start_pos 0, the slot holding garbage), the others carry their state; slots are a permutation with two
// slots no sequence uses (left bit for bit as they were); then two more decode steps of all of them, carrying on.
void decode_steps(const Shape& sh) {
  for (const LightningStateDtype dt : {LightningStateDtype::kFp32, LightningStateDtype::kBf16})
    for (const int batch : {1, 8, 64}) {
      SCOPED_TRACE("heads " + std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads) + " d " +
                   std::to_string(sh.d) + " batch " + std::to_string(batch) + " state " + dtype_name(dt));
      std::mt19937_64 rng(test::new_seed());
      const int slots = batch + 2;  // 3, 10, 66: all coprime to 7, so 7 i + 1 mod slots is a permutation
      States st(dt, slots, sh, rng);
      std::vector<Seq> seqs;
      for (int i = 0; i < batch; ++i) seqs.push_back({1, i % 3 == 0 ? 0 : 40 + i, (7 * i + 1) % slots});
      check_step(sh, seqs, 64, {}, &st, rng);
      for (int step = 0; step < 2; ++step) {
        for (Seq& s : seqs) s.start_pos += 1;
        check_step(sh, seqs, 64, {}, &st, rng);
      }
    }
}

// Head_dim 64 (tiny-sala's heads) and 128 with grouped kv heads: the decode step's four tilings (fp32 / bf16
// state, d 64 / 128).
TEST(Lightning, DecodeStepsAtBatch1And8And64) {
  KT_SKIP_WITHOUT_GPU("lightning attention kernels");
  decode_steps({4, 4, 64});
  decode_steps({8, 2, 128});
}

TEST(Lightning, DecodeStepsAtBatch1And8And64ReleaseShape) {
  KT_SKIP_WITHOUT_GPU("lightning attention kernels");
  decode_steps({32, 32, 128});  // MiniCPM-SALA's lightning layers
}

// q/k norm + RoPE, then the lightning step, launched back to back on one stream as the model launches them (both
// with programmatic dependent launch), against the same two launches with a device synchronisation between them:
// the outputs and the states must be the same bit for bit. The lightning step's decode grid runs first and its
// chunked prefill waits only on that grid: if the decode grid could end without a wait (a step of prefills alone
// gives it no decode sequence), the prefill would read q and k before the rotation has written them.
TEST(Lightning, ChainedAfterQkNormEqualsTheSameLaunchesSynchronised) {
  KT_SKIP_WITHOUT_GPU("lightning attention kernels");
  const Shape sh{32, 32, 128};
  const int width = (sh.heads + 2 * sh.kv_heads) * sh.d, stride = width + 8;
  cudaStream_t stream = nullptr;
  KT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Prefills alone (long ones: the rotation of 3700 tokens takes long enough for a missing wait to show), a
  // mixed step, and decode alone.
  const std::vector<std::vector<Seq>> steps = {{{3000, 0, 0}, {700, 0, 2}}, {{2000, 0, 1}, {1, 50, 3}},
                                               {{1, 10, 0}, {1, 20, 1}, {1, 0, 2}}};
  for (const LightningStateDtype dt : {LightningStateDtype::kFp32, LightningStateDtype::kBf16})
    for (const auto& seqs : steps) {
      SCOPED_TRACE(std::string("state ") + dtype_name(dt) + ", " + std::to_string(seqs.size()) + " sequences, first " +
                   std::to_string(seqs[0].tokens) + " tokens");
      std::mt19937_64 rng(test::new_seed());
      std::vector<int32_t> offsets = {0}, starts, slots, pos;
      int max_tokens = 1;
      for (const Seq& q : seqs) {
        offsets.push_back(offsets.back() + q.tokens);
        starts.push_back(q.start_pos), slots.push_back(q.slot);
        max_tokens = std::max(max_tokens, q.tokens);
        for (int i = 0; i < q.tokens; ++i) pos.push_back(q.start_pos + i);
      }
      const int T = offsets.back(), B = int(seqs.size());
      std::vector<uint16_t> bits;
      std::vector<float> unused;
      test::random_bf16(rng, size_t(T) * stride, 3.f, &bits, &unused);
      const std::vector<float> gq = norm_weights(rng, sh.d), gk = norm_weights(rng, sh.d);
      States st(dt, 4, sh, rng);
      const size_t state_bytes = st.elems * lightning_state_bytes(dt);
      const auto state0 = st.dev.download<uint8_t>(state_bytes);
      const auto g = alibi_log_decay(sh.heads);
      Dev dqkv(bits.size() * 2), dout(size_t(T) * sh.heads * sh.d * 4), doff(offsets.size() * 4), dstart(B * 4),
          dslot(B * 4), dpos(T * 4), dg(g.size() * 4), dgq(sh.d * 4), dgk(sh.d * 4);
      doff.upload(offsets), dstart.upload(starts), dslot.upload(slots), dpos.upload(pos), dg.upload(g);
      dgq.upload(gq), dgk.upload(gk);
      LightningQkArgs qa;
      qa.qkv = dqkv.p, qa.row_stride = stride, qa.q_norm = dgq.as<float>(), qa.k_norm = dgk.as<float>();
      qa.positions = dpos.as<int32_t>(), qa.rope = true, qa.rope_theta = 10000.f, qa.eps = 1e-6f, qa.tokens = T;
      qa.heads = sh.heads, qa.kv_heads = sh.kv_heads, qa.head_dim = sh.d;
      LightningArgs a;
      a.qkv = dqkv.p, a.row_stride = stride, a.out = dout.as<float>(), a.state = st.dev.p, a.state_dtype = dt;
      a.slots = st.slots, a.q_offsets = doff.as<int32_t>(), a.start_pos = dstart.as<int32_t>();
      a.seq_slots = dslot.as<int32_t>(), a.log_decay = dg.as<float>(), a.scale = 1.f / std::sqrt(float(sh.d));
      a.batch = B, a.max_tokens = max_tokens, a.chunk = 64, a.heads = sh.heads, a.kv_heads = sh.kv_heads;
      a.head_dim = sh.d, a.prefill_form = LightningPrefillForm::kAuto;
      ASSERT_EQ(lightning_qk_can_implement(qa), "");
      ASSERT_EQ(lightning_can_implement(a), "");
      std::vector<float> out[2];
      std::vector<uint8_t> state[2];
      for (const bool synchronised : {true, false}) {
        dqkv.upload(bits), st.dev.upload(state0), dout.poison();
        KT_CUDA(cudaDeviceSynchronize());
        KT_CUDA(lightning_qk_run(qa, stream));
        if (synchronised) KT_CUDA(cudaStreamSynchronize(stream));
        KT_CUDA(lightning_run(a, stream));
        KT_CUDA(cudaStreamSynchronize(stream));
        out[synchronised] = dout.download<float>(size_t(T) * sh.heads * sh.d);
        state[synchronised] = st.dev.download<uint8_t>(state_bytes);
      }
      size_t out_diff = 0, state_diff = 0;
      for (size_t i = 0; i < out[0].size(); ++i) out_diff += std::memcmp(&out[0][i], &out[1][i], 4) != 0;
      for (size_t i = 0; i < state[0].size(); ++i) state_diff += state[0][i] != state[1][i];
      EXPECT_EQ(out_diff, 0u) << "outputs differ between the chained and the synchronised launches";
      EXPECT_EQ(state_diff, 0u) << "state bytes differ between the chained and the synchronised launches";
    }
  KT_CUDA(cudaStreamDestroy(stream));
}

TEST(Lightning, CanImplementNamesTheFieldAndItsValues) {
  LightningArgs a;
  alignas(16) int dummy = 0;
  a.qkv = &dummy, a.state = &dummy, a.out = reinterpret_cast<float*>(&dummy);
  a.q_offsets = &dummy, a.start_pos = &dummy, a.seq_slots = &dummy;
  a.log_decay = reinterpret_cast<float*>(&dummy), a.slots = 1, a.batch = 1, a.heads = 4, a.kv_heads = 4;
  a.head_dim = 64, a.row_stride = 12 * 64, a.chunk = 64;
  EXPECT_EQ(lightning_can_implement(a), "");
  a.head_dim = 96;
  EXPECT_NE(lightning_can_implement(a).find("head_dim: must be 64 or 128"), std::string::npos);
  a.head_dim = 64, a.chunk = 24;
  EXPECT_NE(lightning_can_implement(a).find("chunk: must be a multiple of 16 in 16..256"), std::string::npos);
  a.chunk = 64, a.kv_heads = 3;
  EXPECT_NE(lightning_can_implement(a).find("heads / kv_heads"), std::string::npos);
  a.kv_heads = 4, a.row_stride = 100;
  EXPECT_NE(lightning_can_implement(a).find("row_stride"), std::string::npos);
  a.row_stride = 12 * 64 + 2, a.prefill_form = LightningPrefillForm::kTensorCores;
  EXPECT_NE(lightning_can_implement(a).find("prefill_form: tensor_cores needs qkv 16-byte aligned and row_stride a "
                                            "multiple of 8"),
            std::string::npos);
  a.prefill_form = LightningPrefillForm::kCudaCores;
  EXPECT_EQ(lightning_can_implement(a), "");
  a.prefill_form = LightningPrefillForm::kAuto;
  a.state = reinterpret_cast<char*>(&dummy) + 4;
  EXPECT_NE(lightning_can_implement(a).find("state: must be 16-byte aligned"), std::string::npos);
  a.state = &dummy;
  LightningQkArgs q;
  q.qkv = &dummy, q.positions = &dummy, q.heads = 4, q.kv_heads = 4, q.head_dim = 512, q.row_stride = 8 * 512;
  EXPECT_NE(lightning_qk_can_implement(q).find("head_dim: must be an even number in 2..256"), std::string::npos);
  OutputGateArgs o;
  o.attn = &dummy, o.out = &dummy, o.gate = &dummy, o.width = 256, o.gate_stride = 128;
  EXPECT_NE(output_gate_can_implement(o).find("gate_stride"), std::string::npos);
}

TEST(LightningQk, NormAndRopeInPlaceMatchTheTwinAndLeaveVAlone) {
  KT_SKIP_WITHOUT_GPU("lightning q/k norm + RoPE kernel");
  std::mt19937_64 rng(test::new_seed());
  // {6, 3, 96}: a warp's heads straddle the q/k boundary, the last warp has heads past the end, and a lane's
  // second pair is partial (48 pairs); {2, 1, 256}: four pairs a lane. 1 and 37 tokens take the kernel's one-head
  // form (up to 64 tokens), 100 its four-heads-a-warp form.
  for (const Shape sh : {Shape{4, 4, 64}, Shape{32, 32, 128}, Shape{8, 2, 128}, Shape{6, 3, 96}, Shape{2, 1, 256}})
    for (const int T : {1, 37, 100})
    for (const bool with_norm : {true, false})
    for (const bool with_rope : {true, false}) {
      SCOPED_TRACE("heads " + std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads) + " d " +
                   std::to_string(sh.d) + " tokens " + std::to_string(T) + (with_norm ? " norm" : "") +
                   (with_rope ? " rope" : " no rope"));
      const int width = (sh.heads + 2 * sh.kv_heads) * sh.d, stride = width + 16;
      std::vector<uint16_t> bits;
      std::vector<float> vals;
      test::random_bf16(rng, size_t(T) * stride, 3.f, &bits, &vals);
      const std::vector<float> gq = norm_weights(rng, sh.d), gk = norm_weights(rng, sh.d);
      std::vector<int32_t> pos(T);
      for (int i = 0; i < T; ++i) pos[i] = T == 1 ? 60000 + int(rng() % 5536) : i < 5 ? i : int(rng() % 65536);
      Dev dqkv(bits.size() * 2), dgq(sh.d * 4), dgk(sh.d * 4), dpos(T * 4);
      dqkv.upload(bits), dgq.upload(gq), dgk.upload(gk), dpos.upload(pos);
      LightningQkArgs a;
      a.qkv = dqkv.p, a.row_stride = stride, a.q_norm = with_norm ? dgq.as<float>() : nullptr;
      a.k_norm = with_norm ? dgk.as<float>() : nullptr, a.positions = dpos.as<int32_t>(), a.rope = with_rope;
      a.rope_theta = 10000.f, a.eps = 1e-6f, a.tokens = T, a.heads = sh.heads, a.kv_heads = sh.kv_heads;
      a.head_dim = sh.d;
      ASSERT_EQ(lightning_qk_can_implement(a), "");
      KT_CUDA(lightning_qk_run(a, nullptr));
      KT_CUDA(cudaDeviceSynchronize());
      auto ref = vals;
      lightning_qk_ref(ref.data(), stride, with_norm ? gq.data() : nullptr, with_norm ? gk.data() : nullptr,
                       pos.data(), with_rope, 10000.f, 1e-6f, T, sh.heads, sh.kv_heads, sh.d);
      const auto got_bits = dqkv.download<uint16_t>(bits.size());
      const auto got = bf16_values(got_bits);
      std::vector<float> qk_got, qk_ref;
      const int qk_w = (sh.heads + sh.kv_heads) * sh.d;
      for (int t = 0; t < T; ++t) {
        qk_got.insert(qk_got.end(), got.begin() + int64_t(t) * stride, got.begin() + int64_t(t) * stride + qk_w);
        qk_ref.insert(qk_ref.end(), ref.begin() + int64_t(t) * stride, ref.begin() + int64_t(t) * stride + qk_w);
        for (int c = qk_w; c < stride; ++c)
          ASSERT_EQ(got_bits[int64_t(t) * stride + c], bits[int64_t(t) * stride + c]) << "v / padding changed, token " << t;
      }
      EXPECT_LT(test::normalized_error(qk_got, qk_ref), 1e-2);
    }
}

TEST(OutputGate, NormOverTheRowAndSigmoidGateMatchTheTwin) {
  KT_SKIP_WITHOUT_GPU("output norm + gate kernel");
  std::mt19937_64 rng(test::new_seed());
  // Widths: tiny-sala's 256 and the release 4096 (whole rows in registers), 1, 33 and 100 (partial warps), 4100
  // and 5000 (columns past the registers' 4096, read in the strided loops; 4100: only 4 of them).
  for (const int width : {256, 4096, 1, 33, 100, 4100, 5000})
   for (const int T : {1, 9, 64})
    for (const bool attn_bf16 : {false, true})
      for (const bool norm : {true, false})
        for (const bool gate : {true, false}) {
          SCOPED_TRACE("width " + std::to_string(width) + " rows " + std::to_string(T) + (attn_bf16 ? " bf16" : " fp32") +
                       (norm ? " norm" : "") + (gate ? " gate" : ""));
          const int gate_stride = 3 * width + 1;  // the gate as a column block of a wider projection (odd stride)
          std::vector<uint16_t> abits, gbits;
          std::vector<float> attn, gv;
          test::random_bf16(rng, size_t(T) * width, 4.f, &abits, &attn);
          test::random_bf16(rng, size_t(T) * gate_stride, 6.f, &gbits, &gv);
          std::vector<float> gamma(width);
          std::uniform_real_distribution<float> u(0.75f, 1.25f);
          for (auto& x : gamma) x = u(rng);
          Dev dattn(attn.size() * 4), dgate(gbits.size() * 2), dgamma(width * 4), dout(size_t(T) * width * 2);
          if (attn_bf16) dattn.upload(abits);
          else dattn.upload(attn);
          dgate.upload(gbits), dgamma.upload(gamma);
          dout.poison();
          OutputGateArgs a;
          a.attn = dattn.p, a.attn_bf16 = attn_bf16, a.gate = gate ? dgate.p : nullptr, a.gate_stride = gate_stride;
          a.gamma = norm ? dgamma.as<float>() : nullptr, a.out = dout.p, a.tokens = T, a.width = width;
          ASSERT_EQ(output_gate_can_implement(a), "");
          KT_CUDA(output_gate_run(a, nullptr));
          KT_CUDA(cudaDeviceSynchronize());
          std::vector<float> ref(size_t(T) * width);
          output_gate_ref(attn.data(), gate ? gv.data() : nullptr, gate_stride, norm ? gamma.data() : nullptr, T, width,
                          1e-6f, ref.data());
          EXPECT_LT(test::normalized_error(bf16_values(dout.download<uint16_t>(ref.size())), ref), 1e-2);
        }
}

}  // namespace
}  // namespace soartune::kernels
