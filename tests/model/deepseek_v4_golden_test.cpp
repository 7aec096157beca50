// The DeepSeek-V4 golden (tests/golden/deepseek-v4, written by transformers 5.25 from our tiny config in the
// release's legacy spelling) and its two config fixtures read to one spec, every key accounted for.
#include <filesystem>

#include <gtest/gtest.h>

#include "day0/model/config_parser.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

// The golden's config (the release's spelling) and the two fixtures (transformers 5.25's save with its
// nested rope_parameters and per-layer lists; the remote-code save of the legacy keys) read alike.
TEST(DeepseekV4Config, GoldenAndBothSpellingsAgree) {
  const fs::path data = DAY0_TEST_DATA_DIR;
  auto golden = load_model_config(data / "golden" / "deepseek-v4" / "config.json");
  ASSERT_TRUE(golden.is_ok()) << golden.status().to_string();
  for (const char* fixture : {"deepseek-v4.v4.json", "deepseek-v4.v5.json"}) {
    SCOPED_TRACE(fixture);
    ConfigAudit audit;
    auto spec = load_model_config(data / "model" / "configs" / fixture, &audit);
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    EXPECT_TRUE(audit.unknown_keys.empty()) << audit.unknown_keys.front();
    EXPECT_TRUE(*spec == *golden);
  }
  // Every layer kind, hash routing and hyper-connections are on in the golden.
  EXPECT_EQ(golden->layers[0].kv_compress_ratio, 0);
  EXPECT_TRUE(golden->layers[1].compressed_sparse);
  EXPECT_EQ(golden->layers[2].kv_compress_ratio, 8);
  EXPECT_TRUE(golden->layers[1].hash_routed);
  EXPECT_FALSE(golden->layers[2].hash_routed);
  EXPECT_EQ(golden->hyper_connections->streams, 4);
}

}  // namespace
}  // namespace day0
