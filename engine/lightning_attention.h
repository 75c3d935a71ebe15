// Lightning attention (MiniCPM-SALA's linear-attention mixer: Simple GLA with a constant log-decay per head)
// in fp32 on the CPU, for one sequence and one head at a time.
//
// Per head, with state S [d_k][d_v] (S = 0 before a sequence's first token) and log-decay g < 0:
//     S_t = exp(g) S_{t-1} + k_t^T v_t,        o_t = scale * q_t S_t
// (the current token enters undecayed; the previous state is decayed once per step). Decode uses this
// recurrence directly. Prefill uses the equivalent chunked form (fla's chunk_simple_gla): for a chunk of C
// tokens with local index i = 1..C and state S before the chunk,
//     o_i   = scale exp(i g) q_i S  +  scale sum_{j<=i} exp((i-j) g) (q_i . k_j) v_j
//     S_new = exp(C g) S  +  sum_j exp((C-j) g) k_j^T v_j
// which costs two C x d x d GEMMs and two C x C x d ones per chunk instead of C rank-1 updates.
// With a bf16 state (the lightning_state_dtype knob) S is rounded to bf16 (round to nearest even) after every
// recurrence step and after every chunk: what a bf16 state slot holds between the GPU kernel's updates. The
// arithmetic itself stays fp32, as it does on the GPU, so the chunk size then decides how often S is rounded.
#pragma once

namespace soartune::engine {

struct LightningHeadArgs {
  const float* q = nullptr;     // [n] rows of d_k, consecutive rows q_stride floats apart (q/k-normed, RoPE'd)
  const float* k = nullptr;     // [n] rows of d_k, k_stride apart
  const float* v = nullptr;     // [n] rows of d_v, v_stride apart
  int q_stride = 0, k_stride = 0, v_stride = 0;
  float* out = nullptr;         // [n] rows of d_v, out_stride apart (overwritten)
  int out_stride = 0;
  float* state = nullptr;       // [d_k][d_v] row-major, updated in place
  int n = 0;                    // tokens
  int dim = 0;                  // d_k = d_v
  float log_decay = 0;          // g (natural log, < 0)
  float scale = 1;              // q scale (1/sqrt(d) for MiniCPM-SALA)
  bool bf16_state = false;      // round S to bf16 after each update
};

// Scratch one call of lightning_head needs for chunks of `chunk` tokens (floats).
inline int lightning_scratch_floats(int chunk, int dim) { return chunk * chunk + 2 * chunk * dim + chunk + 1; }

// n == 1: the recurrence; n > 1: chunks of `chunk` tokens. `scratch` holds lightning_scratch_floats(chunk, dim).
void lightning_head(const LightningHeadArgs& a, int chunk, float* scratch);

}  // namespace soartune::engine
