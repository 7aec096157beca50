// The repository's Dockerfile (no Docker engine runs here, so the image is not built in a test): its
// runtime stage installs the Debian package of every shared library the built day0 links (ldd +
// dpkg -S on this Debian machine, the image's base), plus mpirun and sshd that the Kubernetes
// manifests of `day0 plan --emit k8s` run; its build stage builds with the README's make target.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace day0::testing {
namespace {

std::string dockerfile() {
  std::ifstream in(std::string(DAY0_TEST_DATA_DIR) + "/../Dockerfile");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The words of the final stage's apt-get install (after the last FROM).
std::set<std::string> runtime_packages(const std::string& text) {
  std::set<std::string> out;
  const std::string stage = text.substr(text.rfind("\nFROM "));
  const size_t at = stage.find("--no-install-recommends");
  if (at == std::string::npos) return out;
  std::istringstream words(stage.substr(at, stage.find("&& rm", at) - at));
  for (std::string w; words >> w;) {
    if (w != "\\" && w.rfind("--", 0) != 0) out.insert(w);
  }
  return out;
}

// `packages` and everything they depend on (as installed here), following Depends and Pre-Depends.
std::set<std::string> with_dependencies(const std::set<std::string>& packages) {
  std::set<std::string> seen;
  std::vector<std::string> todo(packages.begin(), packages.end());
  while (!todo.empty()) {
    const std::string p = todo.back();
    todo.pop_back();
    if (!seen.insert(p).second) continue;
    std::string deps = shell_output("dpkg-query -W -f='${Depends}, ${Pre-Depends}' " + p + " 2>/dev/null");
    // "a (>= 1), b | c, d:any": every alternative counts (the one installed here is among them).
    for (char& c : deps) {
      if (c == ',' || c == '|') c = ' ';
    }
    std::istringstream words(deps);
    for (std::string w; words >> w;) {
      if (w.front() == '(') {
        while (w.back() != ')' && words >> w) {
        }
        continue;
      }
      w = w.substr(0, w.find(':'));
      if (!w.empty() && !seen.count(w)) todo.push_back(w);
    }
  }
  return seen;
}

TEST(Dockerfile, RuntimeStageInstallsEveryLibraryDay0Links) {
  if (shell_output("command -v dpkg ldd").empty()) GTEST_SKIP() << "dpkg or ldd not found (not Debian)";
  const std::string text = dockerfile();
  ASSERT_FALSE(text.empty()) << "no Dockerfile at the repository root";
  const std::set<std::string> installed = runtime_packages(text);
  ASSERT_FALSE(installed.empty()) << text;
  for (const char* needed : {"openmpi-bin", "openssh-server", "openssh-client"})
    EXPECT_TRUE(installed.count(needed)) << needed << " (the k8s manifests run mpirun over ssh)";
  const std::set<std::string> closure = with_dependencies(installed);
  std::istringstream ldd(shell_output(std::string("ldd ") + DAY0_CLI_PATH));
  int libraries = 0;
  for (std::string line; std::getline(ldd, line);) {
    const size_t arrow = line.find("=> /");
    if (arrow == std::string::npos) continue;  // the vDSO, the loader
    std::string path = line.substr(arrow + 3, line.find(" (", arrow) - arrow - 3);
    // The sanitizer build's runtimes (this test also runs there) are not in a release image.
    if (path.find("/libasan") != std::string::npos || path.find("/libubsan") != std::string::npos) continue;
    ++libraries;
    // usrmerge: dpkg may know the file under /usr/lib or /lib.
    std::string owner = shell_output("dpkg -S '" + path + "' 2>/dev/null");
    if (owner.empty() && path.rfind("/usr", 0) == 0)
      owner = shell_output("dpkg -S '" + path.substr(4) + "' 2>/dev/null");
    if (owner.empty() && path.rfind("/usr", 0) != 0)
      owner = shell_output("dpkg -S '/usr" + path + "' 2>/dev/null");
    ASSERT_FALSE(owner.empty()) << path << " belongs to no Debian package";
    std::string package = owner.substr(0, owner.find(':'));
    const std::string priority = shell_output("dpkg-query -W -f='${Priority} ${Essential}' " + package);
    if (priority.find("required") != std::string::npos || priority.find("yes") != std::string::npos) continue;
    // A library pulled in by a listed package (Open MPI's own dependencies) is fine too.
    const bool via_dependency = closure.count(package) > 0;
    EXPECT_TRUE(via_dependency) << path << " comes from " << package
                                << ", which the runtime stage does not install";
  }
  EXPECT_GT(libraries, 3);
}

TEST(Dockerfile, BuildStageUsesTheReadmesBuild) {
  const std::string text = dockerfile();
  EXPECT_NE(text.find("FROM debian:bookworm"), std::string::npos);
  EXPECT_NE(text.find("make build-day0"), std::string::npos);
  EXPECT_NE(text.find("COPY --from=build /src/build/release/bin/day0"), std::string::npos);
}

}  // namespace
}  // namespace day0::testing
