// The GPTQ checkpoint round trip on the shared tiny model: a mixed-precision 4-bit config written by the
// writer (engine/gptq_checkpoint.h) and loaded back with hf: gives the engine's own quantised weights and
// logits exactly; the worker's --write-checkpoint mode; what the format cannot express is refused.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/gptq_checkpoint.h"
#include "engine/gptq_format.h"
#include "engine/model_loader.h"
#include "engine/quantize.h"
#include "engine_runs.h"
#include "tiny_model.h"

namespace soartune::engine {
namespace {

namespace fs = std::filesystem;
using testing::read_jsonl;
using testing::tiny_model_dir;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("soartune-gptq-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(d);
  return d;
}

// W4 g128 with 8-bit edge layers, one 16-bit MLP and an 8-bit lm_head: every kind of dynamic rule.
LaunchConfig mixed() {
  LaunchConfig l;
  l.weight_bits = 4;
  l.weight_group_size = 128;
  l.edge_layers_bits = 8;
  l.lm_head_bits = 8;
  l.layer_overrides[2].mlp = 16;
  return l;
}

ModelWeights quantised(const LaunchConfig& launch) {
  ModelWeights w = testing::load_checked("hf:" + tiny_model_dir());
  const Status s = quantize_model(w, launch);
  EXPECT_TRUE(s.ok()) << s.message;
  return w;
}

void expect_same_linear(const QuantizedLinear& a, const QuantizedLinear& b, const std::string& name) {
  EXPECT_EQ(a.bits, b.bits) << name;
  EXPECT_EQ(a.groups_per_row(), b.groups_per_row()) << name;
  if (a.bits == 16) {
    EXPECT_TRUE(a.w16 == b.w16) << name;
    return;
  }
  EXPECT_TRUE(a.q == b.q) << name;
  EXPECT_TRUE(a.scales == b.scales) << name;
}

TEST(GptqCheckpoint, RoundTripGivesTheSameWeightsAndLogits) {
  SKIP_WITHOUT_TINY_MODEL();
  const ModelWeights mine = quantised(mixed());
  const fs::path dir = fresh_dir("roundtrip");
  auto files = write_gptq_checkpoint(mine, tiny_model_dir(), dir.string());
  ASSERT_TRUE(files.ok()) << files.status().message;
  for (const char* f : {"model.safetensors", "config.json", "quantize_config.json", "tokenizer.json", "generation_config.json"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));

  std::ifstream in(dir / "quantize_config.json");
  const auto qc = nlohmann::json::parse(in);
  EXPECT_EQ(qc["quant_method"], "gptq");
  EXPECT_EQ(qc["bits"], 4);
  EXPECT_EQ(qc["group_size"], 128);
  EXPECT_EQ(qc["sym"], true);
  EXPECT_EQ(qc["desc_act"], false);
  EXPECT_EQ(qc["lm_head"], true);
  EXPECT_EQ(qc["dynamic"]["+:model\\.layers\\.0\\.self_attn\\..*"]["bits"], 8);
  EXPECT_EQ(qc["dynamic"]["+:model\\.layers\\.5\\.mlp\\..*"]["bits"], 8);
  EXPECT_TRUE(qc["dynamic"]["-:model\\.layers\\.2\\.mlp\\..*"].empty());
  EXPECT_EQ(qc["dynamic"]["+:lm_head"]["bits"], 8);
  EXPECT_EQ(qc["dynamic"].size(), 6u);

  auto back = load_model("hf:" + dir.string());
  ASSERT_TRUE(back.ok()) << back.status().message;
  const ModelWeights& theirs = back.value();
  EXPECT_EQ(theirs.layers[1].wq.bits, 4);
  EXPECT_EQ(theirs.layers[2].w_up.bits, 16);
  for (std::size_t i = 0; i < mine.layers.size(); ++i) {
    const LayerWeights &a = mine.layers[i], &b = theirs.layers[i];
    const std::string p = "layer " + std::to_string(i) + " ";
    expect_same_linear(a.wq, b.wq, p + "q");
    expect_same_linear(a.wk, b.wk, p + "k");
    expect_same_linear(a.wv, b.wv, p + "v");
    expect_same_linear(a.wo, b.wo, p + "o");
    expect_same_linear(a.w_gate, b.w_gate, p + "gate");
    expect_same_linear(a.w_up, b.w_up, p + "up");
    expect_same_linear(a.w_down, b.w_down, p + "down");
    EXPECT_TRUE(a.attn_norm == b.attn_norm && a.mlp_norm == b.mlp_norm) << p;
  }
  expect_same_linear(mine.lm_head, theirs.lm_head, "lm_head");
  expect_same_linear(mine.embed, theirs.embed, "embed");

  // Running the imported checkpoint as a trial does (quantize_model with the reference knobs) leaves it as is.
  ModelWeights run = back.value();
  ASSERT_TRUE(quantize_model(run, LaunchConfig::reference()).ok());
  const auto rows = read_jsonl(tiny_model_dir() + "/eval_public.jsonl");
  for (int r = 0; r < 2; ++r) {
    std::vector<int32_t> ids = rows[r]["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t t : rows[r]["continuation_ids"].get<std::vector<int32_t>>()) ids.push_back(t);
    const std::vector<float> a = testing::cpu_logits(mine, ids), b = testing::cpu_logits(run, ids);
    ASSERT_EQ(a.size(), b.size());
    float max_diff = 0;
    for (std::size_t k = 0; k < a.size(); ++k) max_diff = std::max(max_diff, std::fabs(a[k] - b[k]));
    EXPECT_EQ(max_diff, 0.f) << "row " << r;
  }
  // Quantising the imported weights again is refused, naming the knob.
  ModelWeights again = back.value();
  const Status s = quantize_model(again, mixed());
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_EQ(s.message.rfind("launch.weight_bits:", 0), 0u) << s.message;
  fs::remove_all(dir);
}

// tests/gptq_decode.py (numpy, written from the format's public description) dequantises every weight of a
// written checkpoint to the engine's dequantised weights, bit for bit.
TEST(GptqCheckpoint, IndependentDecoderGivesTheEnginesWeights) {
  SKIP_WITHOUT_TINY_MODEL();
  // Debian's interpreter first: another python3 earlier on PATH may lack Debian's python3-numpy.
  std::string python;
  for (const char* candidate : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(candidate) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) {
      python = candidate;
      break;
    }
  if (python.empty()) GTEST_SKIP() << "python3-numpy is not installed (scripts/install-deps.sh installs it)";
  const ModelWeights mine = quantised(mixed());
  const fs::path dir = fresh_dir("decoder");
  auto files = write_gptq_checkpoint(mine, tiny_model_dir(), (dir / "ckpt").string());
  ASSERT_TRUE(files.ok()) << files.status().message;
  // The engine's weights as fp32 [out][in], by checkpoint name.
  std::vector<TensorToWrite> ref;
  auto add = [&](const std::string& name, const QuantizedLinear& l) {
    std::vector<float> w(static_cast<std::size_t>(l.out) * l.in);
    dequantize_rows(l, 0, l.out, w.data());
    TensorToWrite t{name + ".weight", TensorDtype::kF32, {l.out, l.in}, std::vector<uint8_t>(w.size() * 4)};
    std::memcpy(t.bytes.data(), w.data(), t.bytes.size());
    ref.push_back(std::move(t));
  };
  add("model.embed_tokens", mine.embed);
  add("lm_head", mine.lm_head);
  for (std::size_t i = 0; i < mine.layers.size(); ++i) {
    const LayerWeights& l = mine.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "self_attn.q_proj", l.wq);
    add(p + "self_attn.k_proj", l.wk);
    add(p + "self_attn.v_proj", l.wv);
    add(p + "self_attn.o_proj", l.wo);
    add(p + "mlp.gate_proj", l.w_gate);
    add(p + "mlp.up_proj", l.w_up);
    add(p + "mlp.down_proj", l.w_down);
  }
  ASSERT_TRUE(write_safetensors((dir / "reference.safetensors").string(), ref).ok());
  const std::string cmd = python + " " + std::string(SOARTUNE_SOURCE_DIR) + "/tests/gptq_decode.py " + (dir / "ckpt").string() + " " +
                          (dir / "reference.safetensors").string();
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["checked"], 2 + 7 * 6);
  EXPECT_EQ(j["quantised"], 1 + 7 * 6 - 3);   // the lm_head and every projection but layer 2's MLP
  EXPECT_TRUE(j["mismatches"].empty()) << out;
  fs::remove_all(dir);
}

TEST(GptqCheckpoint, PackingFollowsTheFormat) {
  // 16 inputs x 8 outputs, 4-bit, groups of 8: code of (o, i) = (i + o) % 15 - 7.
  QuantizedLinear l;
  l.out = 8;
  l.in = 16;
  l.bits = 4;
  l.group_size = 8;
  for (int o = 0; o < 8; ++o)
    for (int i = 0; i < 16; ++i) l.q.push_back(static_cast<int8_t>((i + o) % 15 - 7));
  for (int o = 0; o < 8; ++o)
    for (int g = 0; g < 2; ++g) l.scales.push_back(0.5f * static_cast<float>(o + 1) + 0.25f * static_cast<float>(g));
  auto p = pack_gptq(l, "x");
  ASSERT_TRUE(p.ok()) << p.status().message;
  const GptqLinear& g = p.value();
  ASSERT_EQ(g.qweight.size(), 2u * 8u);
  for (int w = 0; w < 2; ++w)
    for (int o = 0; o < 8; ++o)
      for (int j = 0; j < 8; ++j) {
        const uint32_t code = (static_cast<uint32_t>(g.qweight[static_cast<std::size_t>(w * 8 + o)]) >> (4 * j)) & 15u;
        EXPECT_EQ(static_cast<int>(code), (w * 8 + j + o) % 15 - 7 + 8);   // unsigned code = q + 8
      }
  ASSERT_EQ(g.qzeros.size(), 2u);   // [2 groups][8 / 8]
  for (int32_t z : g.qzeros) EXPECT_EQ(static_cast<uint32_t>(z), 0x77777777u);   // v1 stores zero - 1 = 7
  EXPECT_EQ(g.g_idx[7], 0);
  EXPECT_EQ(g.g_idx[8], 1);
  l.scales[0] = 0.1f;   // not an fp16 value
  EXPECT_FALSE(pack_gptq(l, "x").ok());
}

TEST(GptqCheckpoint, RefusesWhatTheFormatCannotExpress) {
  SKIP_WITHOUT_TINY_MODEL();
  const fs::path dir = fresh_dir("refuse");
  auto none = write_gptq_checkpoint(quantised(LaunchConfig::reference()), tiny_model_dir(), dir.string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message.find("quantises no weight"), std::string::npos) << none.status().message;
  fs::create_directories(dir);
  std::ofstream(dir / "something") << "x";
  auto busy = write_gptq_checkpoint(quantised(mixed()), tiny_model_dir(), dir.string());
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.status().message.find("not empty"), std::string::npos) << busy.status().message;
  fs::remove_all(dir);
}

#ifdef SOARTUNE_WORKER_PATH
struct WorkerRun {
  int rc = -1;
  std::string out;
};
WorkerRun run_command(const std::string& cmd) {
  WorkerRun r;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
#endif

TEST(GptqCheckpoint, WorkerWritesTheTrialsCheckpoint) {
#ifndef SOARTUNE_WORKER_PATH
  GTEST_SKIP() << "soartune-worker not built";
#else
  SKIP_WITHOUT_TINY_MODEL();
  const fs::path work = fresh_dir("worker");
  fs::create_directories(work);
  const std::string workload = "workload: {name: w, requests: [{name: a, input_len: 8, output_len: 4, count: 1}]}\n";
  std::ofstream(work / "trial.yaml") << "model: hf:" << tiny_model_dir() << "\nlaunch: {weight_bits: 4, weight_group_size: 64}\n" << workload;
  const WorkerRun ok = run_command(std::string(SOARTUNE_WORKER_PATH) + " --trial " + (work / "trial.yaml").string() + " --write-checkpoint " +
                     (work / "ckpt").string());
  ASSERT_EQ(ok.rc, 0) << ok.out;
  const auto j = nlohmann::json::parse(ok.out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["dir"], (work / "ckpt").string());
  EXPECT_NE(std::find(j["files"].begin(), j["files"].end(), "model.safetensors"), j["files"].end());
  auto back = load_model("hf:" + (work / "ckpt").string());
  ASSERT_TRUE(back.ok()) << back.status().message;
  EXPECT_EQ(back.value().layers[0].w_down.bits, 4);
  EXPECT_EQ(back.value().layers[0].w_down.group_size, 64);

  std::ofstream(work / "synthetic.yaml") << "model: synthetic:tiny\nlaunch: {weight_bits: 4}\n" << workload;
  const WorkerRun bad = run_command(std::string(SOARTUNE_WORKER_PATH) + " --trial " + (work / "synthetic.yaml").string() + " --write-checkpoint " +
                      (work / "ckpt2").string());
  EXPECT_EQ(bad.rc, 2) << bad.out;
  const auto e = nlohmann::json::parse(bad.out);
  EXPECT_EQ(e["ok"], false);
  EXPECT_NE(e["error"].get<std::string>().find("hf:<dir>"), std::string::npos) << bad.out;
  fs::remove_all(work);
#endif
}

}  // namespace
}  // namespace soartune::engine

namespace soartune::engine {
namespace {

// The sparse-attention knobs reach the served checkpoint's config.json (the serving engine reads them only
// there): the worker's checkpoint of the shared tiny-sala carries the trial's topk and window in its
// sparse_config, every other sparse_config entry as the source had it; on a model without sparse_config
// (tiny-llama-bpe4k) the knobs change nothing and none is added.
TEST(GptqCheckpoint, WorkerCarriesTheSparseKnobsIntoConfigJson) {
#ifndef SOARTUNE_WORKER_PATH
  GTEST_SKIP() << "soartune-worker not built";
#else
  const std::string sala = std::string(SOARTUNE_SHARED_DIR) + "/models/tiny-sala";
  if (!fs::exists(sala + "/config.json")) GTEST_SKIP() << "no shared test model at " << sala << "; skipped";
  SKIP_WITHOUT_TINY_MODEL();
  const fs::path work = fresh_dir("sparse");
  fs::create_directories(work);
  const std::string rest = "launch: {weight_bits: 8, weight_group_size: 64, sparse_topk: 32, sparse_window: 1024}\n"
                           "workload: {name: w, requests: [{name: a, input_len: 8, output_len: 4, count: 1}]}\n";
  auto read_json = [](const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); };
  std::ofstream(work / "sala.yaml") << "model: hf:" << sala << "\n" << rest;
  const WorkerRun ok = run_command(std::string(SOARTUNE_WORKER_PATH) + " --trial " + (work / "sala.yaml").string() +
                                   " --write-checkpoint " + (work / "sala").string());
  ASSERT_EQ(ok.rc, 0) << ok.out;
  nlohmann::json want = read_json(fs::path(sala) / "config.json")["sparse_config"];
  ASSERT_TRUE(want.is_object());
  want["topk"] = 32;
  want["window_size"] = 1024;
  EXPECT_EQ(read_json(work / "sala" / "config.json")["sparse_config"], want);
  auto back = load_model("hf:" + (work / "sala").string());
  ASSERT_TRUE(back.ok()) << back.status().message;

  std::ofstream(work / "llama.yaml") << "model: hf:" << tiny_model_dir() << "\n" << rest;
  const WorkerRun llama = run_command(std::string(SOARTUNE_WORKER_PATH) + " --trial " + (work / "llama.yaml").string() +
                                      " --write-checkpoint " + (work / "llama").string());
  ASSERT_EQ(llama.rc, 0) << llama.out;
  EXPECT_FALSE(read_json(work / "llama" / "config.json").contains("sparse_config"));
  fs::remove_all(work);
#endif
}

}  // namespace
}  // namespace soartune::engine
