// The family-file budget of docs/HOWTO-add-a-model.md: a family that reuses existing blocks is one file
// of at most 300 lines under src/day0/model/families/. A family that brings a new mechanism puts the
// mechanism in the shared blocks (runtime/, model/weight_blocks) and stays under the budget too; an
// exception would have to be listed here with its reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace day0 {
namespace {

int64_t count_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

TEST(FamilyFiles, EachIsAtMost300Lines) {
  constexpr int64_t kBudget = 300;
  const std::filesystem::path dir =
      std::filesystem::path(DAY0_TEST_DATA_DIR) / ".." / "src" / "day0" / "model" / "families";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const auto ext = entry.path().extension();
    if (ext != ".cpp" && ext != ".h") continue;
    ++files;
    const int64_t lines = count_lines(entry.path());
    EXPECT_GT(lines, 0) << entry.path();
    EXPECT_LE(lines, kBudget) << entry.path().filename().string() << " has " << lines
                              << " lines; a family file reusing the shared blocks has at most " << kBudget
                              << " (move a new mechanism into the blocks)";
  }
  EXPECT_GE(files, 12);  // the registered families are found at all
}

}  // namespace
}  // namespace day0
