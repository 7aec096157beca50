// The day0-reference/1 contract: round trip, and clear rejection of files that are not in the format.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "day0/align/reference_dump.h"
#include "day0/io/safetensors_writer.h"

namespace day0 {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("day0_dump_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

ReferenceDump small_dump() {
  ReferenceDump d;
  d.metadata["producer"] = "test";
  d.metadata["version"] = "1";
  d.metadata["dtype"] = "f32";
  for (int p = 0; p < 2; ++p) {
    ReferencePrompt r;
    r.input_ids = {1, 2, 3 + p};
    r.logits = FloatMatrix(3, 5);
    for (size_t i = 0; i < r.logits.data.size(); ++i) r.logits.data[i] = static_cast<float>(i) * 0.5f - p;
    r.hidden[0] = FloatMatrix(3, 4);
    r.hidden[1] = FloatMatrix(3, 4);
    r.hidden[1].data[5] = 2.5f;
    r.final_norm = FloatMatrix(3, 4);
    r.greedy_ids = {4, 0};
    r.greedy_logits = FloatMatrix(2, 5);
    r.greedy_logits.data[4] = 1;
    d.prompts.push_back(std::move(r));
  }
  return d;
}

TEST(ReferenceDump, RoundTrip) {
  const std::string path = temp_path("rt.safetensors");
  const ReferenceDump d = small_dump();
  ASSERT_TRUE(write_reference_dump(d, path).is_ok());
  auto back = read_reference_dump(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->value("format"), kReferenceFormat);
  EXPECT_EQ(back->producer(), "test");
  ASSERT_EQ(back->prompts.size(), 2u);
  EXPECT_EQ(back->prompts[1].input_ids, d.prompts[1].input_ids);
  EXPECT_EQ(back->prompts[1].logits.data, d.prompts[1].logits.data);
  EXPECT_EQ(back->prompts[0].hidden.at(1).data, d.prompts[0].hidden.at(1).data);
  EXPECT_TRUE(back->prompts[0].final_norm.has_value());
  EXPECT_EQ(back->prompts[0].greedy_ids, d.prompts[0].greedy_ids);
  EXPECT_EQ(back->prompts[0].greedy_logits.data, d.prompts[0].greedy_logits.data);
  std::remove(path.c_str());
}

// Writes a safetensors file with the given metadata and tensors, bypassing the dump writer's checks.
std::string write_raw(const std::string& name, const std::map<std::string, std::string>& meta,
                      std::vector<PendingTensor> tensors) {
  SafetensorsWriter w;
  for (const auto& [k, v] : meta) w.set_metadata(k, v);
  for (auto& t : tensors) EXPECT_TRUE(w.add(std::move(t)).is_ok());
  const std::string path = temp_path(name);
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

void expect_rejected(const std::string& path, const std::string& needle) {
  auto r = read_reference_dump(path);
  ASSERT_FALSE(r.is_ok()) << path;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a day0-reference/1 reference dump"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  std::remove(path.c_str());
}

const std::map<std::string, std::string> kGoodMeta = {{"format", "day0-reference/1"}, {"producer", "x"}};

TEST(ReferenceDump, RejectsFilesOutsideTheContract) {
  expect_rejected(write_raw("nometa.safetensors", {}, {tensor_f32("w", {2}, {1, 2})}),
                  "has no \"format\" key");
  expect_rejected(write_raw("pt.safetensors", {{"format", "pt"}}, {tensor_f32("w", {2}, {1, 2})}),
                  "__metadata__.format is \"pt\"");
  expect_rejected(write_raw("noprompt.safetensors", kGoodMeta, {tensor_f32("w", {2}, {1, 2})}), "no prompts");
  expect_rejected(
      write_raw("nologits.safetensors", kGoodMeta, {tensor_i64("prompt.0.input_ids", {2}, {1, 2})}),
      "prompt.0.logits is missing");
  expect_rejected(write_raw("bf16.safetensors", kGoodMeta,
                            {tensor_i64("prompt.0.input_ids", {2}, {1, 2}),
                             tensor_bf16("prompt.0.logits", {2, 3}, {0, 0, 0, 0, 0, 0})}),
                  "expected F32");
  expect_rejected(write_raw("rows.safetensors", kGoodMeta,
                            {tensor_i64("prompt.0.input_ids", {2}, {1, 2}),
                             tensor_f32("prompt.0.logits", {3, 3}, std::vector<float>(9))}),
                  "prompt.0.logits: expected [2, 3]");
  expect_rejected(write_raw("gap.safetensors", kGoodMeta,
                            {tensor_i64("prompt.1.input_ids", {1}, {1}),
                             tensor_f32("prompt.1.logits", {1, 3}, std::vector<float>(3))}),
                  "prompt.0 is missing");
  expect_rejected(write_raw("name.safetensors", kGoodMeta,
                            {tensor_i64("prompt.0.input_ids", {1}, {1}),
                             tensor_f32("prompt.0.logits", {1, 3}, std::vector<float>(3)),
                             tensor_f32("prompt.0.hidden.x", {1, 3}, std::vector<float>(3))}),
                  "malformed tensor name prompt.0.hidden.x");
  expect_rejected(write_raw("vocab.safetensors", kGoodMeta,
                            {tensor_i64("prompt.0.input_ids", {1}, {7}),
                             tensor_f32("prompt.0.logits", {1, 3}, std::vector<float>(3))}),
                  "outside [0, 3)");
}

TEST(ReferenceDump, RejectsWhatIsNotSafetensors) {
  const std::string path = temp_path("text.safetensors");
  std::ofstream(path) << "hello, not a safetensors file";
  expect_rejected(path, "reference dump");
  expect_rejected(temp_path("missing.safetensors"), "reference dump");
}

TEST(ReferenceDump, IgnoresTensorsOutsideThePromptNamespace) {
  const std::string path = write_raw(
      "extra.safetensors", kGoodMeta,
      {tensor_i64("prompt.0.input_ids", {1}, {1}),
       tensor_f32("prompt.0.logits", {1, 3}, std::vector<float>(3)), tensor_f32("producer_notes", {1}, {1})});
  auto r = read_reference_dump(path);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->prompts.size(), 1u);
  std::remove(path.c_str());
}

TEST(ReferenceDump, WriterRefusesInconsistentDumps) {
  ReferenceDump d = small_dump();
  d.prompts[1].logits = FloatMatrix(3, 6);  // another vocabulary
  EXPECT_FALSE(write_reference_dump(d, temp_path("bad.safetensors")).is_ok());
}

}  // namespace
}  // namespace day0
