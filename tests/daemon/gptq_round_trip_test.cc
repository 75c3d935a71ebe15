// The GPTQ round trip through a real soartuned: a short job on the shared tiny-llama-bpe4k quantises a trial by
// GPTQ (mixed precision: 4-bit g128, 8-bit first and last layers, 8-bit lm_head, layer 2's MLP kept 16-bit),
// the trial is exported as an sglang bundle over gRPC, and a second job serves the bundle's checkpoint
// (`model: hf:<bundle>/checkpoint`) with 16-bit compute. The worker of the second job must choose the same
// token at every measured position as the quantised trial did (equal top-1 digests, equal task accuracy over
// the same positions): the checkpoint holds exactly the weights that were measured. Skipped where the shared
// model is absent.
#include <filesystem>
#include <fstream>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "core/worker_result.h"
#include "daemon_process.h"
#include "soartune/v1/tuner.grpc.pb.h"
#include "tuner_client.h"

namespace soartune::daemon {
namespace {

namespace pb = ::soartune::v1;
namespace fs = std::filesystem;
using testing::Daemon;
using testing::TempDir;
using testing::TunerClient;

// The bundle export over gRPC (the CLI's path to it is tested in bundle_export_test.cc).
grpc::Status export_bundle(TunerClient& tuner, const std::string& id, int64_t trial, pb::ExportConfigResponse* out) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(240));
  pb::ExportConfigRequest req;
  req.set_job_id(id);
  req.set_trial(trial);
  req.set_format("sglang-bundle");
  return tuner.stub().ExportConfig(&ctx, req, out);
}

// The measured accuracy of a trial, read back from the worker's result the daemon stored (typed parse).
AccuracyMeasurement accuracy_of(const pb::Trial& t) {
  Result<WorkerResult> r = parse_worker_output(t.result_json());
  EXPECT_TRUE(r.ok()) << r.status().message;
  return r.ok() ? r.value().accuracy : AccuracyMeasurement{};
}

std::string job(const std::string& name, const std::string& model, const std::string& accuracy_set,
                const std::string& space, const std::string& extra) {
  return "name: " + name + "\nmodel: " + model + "\nbackend: cpu\nstrategy: random\nseed: 5\n" +
         "budget: {trials: 2}\ntrial_timeout_s: 240\n"
         "workload: {name: rt, requests: [{name: a, input_len: 8, output_len: 4, count: 1}]}\n"
         "accuracy: {set: " + accuracy_set + ", samples: 16}\n" + extra + "space:\n" + space;
}

TEST(GptqRoundTrip, BundleCheckpointServedWithSixteenBitComputeChoosesTheMeasuredTokens) {
  const std::string model_dir = std::string(SOARTUNE_SHARED_DIR) + "/models/tiny-llama-bpe4k";
  if (!fs::exists(model_dir + "/config.json"))
    GTEST_SKIP() << "no shared test model at " << model_dir << " (SOARTUNE_SHARED_DIR); skipped";
  TempDir dir;
  Daemon d(dir, {"--data-root", dir.path(), "--data-root", SOARTUNE_SHARED_DIR});
  ASSERT_TRUE(d.start()) << d.log();
  TunerClient tuner(d.addr());
  const std::string eval = model_dir + "/eval_public.jsonl";

  // Job 1: the reference, then the one config the space holds (a mixed-precision GPTQ config).
  const std::string id1 = tuner.submit(job(
      "rt-quantise", "hf:" + model_dir, eval,
      "  weight_bits: {type: choice, values: [4]}\n  weight_group_size: {type: choice, values: [128]}\n"
      "  edge_layers_bits: {type: choice, values: [8]}\n  lm_head_bits: {type: choice, values: [8]}\n"
      "  quant_method: {type: choice, values: [gptq]}\n",
      "layer_overrides: {\"2.mlp\": 16}\nquantization: {calibration_samples: 8, damp_pct: 10}\n"));
  ASSERT_FALSE(id1.empty());
  ASSERT_EQ(tuner.wait_finished(id1, 280).state(), pb::JOB_SUCCEEDED) << d.log();
  const std::vector<pb::Trial> t1 = tuner.trials(id1);
  ASSERT_EQ(t1.size(), 2u);
  ASSERT_EQ(t1[1].status(), pb::TRIAL_COMPLETE) << t1[1].error();
  EXPECT_EQ(t1[1].params().at("quant_method"), "gptq");
  const AccuracyMeasurement quantised = accuracy_of(t1[1]);
  ASSERT_EQ(quantised.metric, "task");
  ASSERT_FALSE(quantised.top1_digest.empty());
  EXPECT_LT(quantised.top1_agreement_pct, 100.0);   // the quantisation changed some choices ...
  EXPECT_GT(quantised.top1_agreement_pct, 80.0);    // ... and kept most

  pb::ExportConfigResponse bundle;
  const grpc::Status es = export_bundle(tuner, id1, 1, &bundle);
  ASSERT_TRUE(es.ok()) << es.error_message() << "\n" << d.log();
  const std::string checkpoint = bundle.bundle_dir() + "/checkpoint";
  ASSERT_TRUE(fs::exists(checkpoint + "/model.safetensors")) << bundle.bundle_dir();
  ASSERT_TRUE(fs::exists(checkpoint + "/quantize_config.json"));

  // Job 2: the bundle's checkpoint as the model; its reference trial computes in 16 bits on the stored weights.
  const std::string id2 = tuner.submit(job("rt-serve", "hf:" + checkpoint, eval,
                                           "  kv_page_size: {type: choice, values: [16]}\n",
                                           ""));
  ASSERT_FALSE(id2.empty());
  ASSERT_EQ(tuner.wait_finished(id2, 280).state(), pb::JOB_SUCCEEDED) << d.log();
  const std::vector<pb::Trial> t2 = tuner.trials(id2);
  ASSERT_GE(t2.size(), 1u);
  ASSERT_EQ(t2[0].status(), pb::TRIAL_COMPLETE) << t2[0].error();
  EXPECT_EQ(t2[0].params().at("weight_bits"), "16");
  const AccuracyMeasurement served = accuracy_of(t2[0]);
  EXPECT_EQ(served.positions, quantised.positions);
  EXPECT_EQ(served.candidate, quantised.candidate);   // hits / positions, exactly
  EXPECT_EQ(served.top1_digest, quantised.top1_digest);
  std::printf("quantised trial: task %.6f, top-1 agreement %.2f%%, digest %s; served checkpoint: task %.6f, digest %s\n",
              quantised.candidate, quantised.top1_agreement_pct, quantised.top1_digest.c_str(), served.candidate,
              served.top1_digest.c_str());
}

}  // namespace
}  // namespace soartune::daemon
