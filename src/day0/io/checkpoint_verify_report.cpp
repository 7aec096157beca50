// Rendering of a VerifyReport: JSON for machines, aligned tables for people.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "day0/core/human.h"
#include "day0/io/checkpoint_verify.h"
#include "day0/io/value_scan.h"

namespace day0 {

namespace {

nlohmann::json file_json(const ShardReport& s) {
  return {{"name", s.name},
          {"status", s.status},
          {"file_size", s.file_size},
          {"n_tensors", s.n_tensors},
          {"tensor_bytes", s.tensor_bytes},
          {"sha256", s.sha256},
          {"expected_sha256", s.expected_sha256},
          {"hash_status", s.hash_status}};
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

std::string finding_line(const Finding& f) {
  std::string where = f.shard;
  if (!f.tensor.empty()) where += (where.empty() ? "" : ": ") + std::string("tensor '") + f.tensor + "'";
  std::string line = fmt::format("  {}  {:<20} {}", f.failed ? "FAIL" : "note", f.kind, where);
  if (!f.message.empty()) line += (where.empty() ? "" : ": ") + f.message;
  if (!f.expected.empty() || !f.found.empty())
    line += fmt::format(" (expected {}, found {})", f.expected, f.found);
  return line;
}

}  // namespace

nlohmann::json verify_report_json(const VerifyReport& report) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : report.shards) shards.push_back(file_json(s));
  nlohmann::json others = nlohmann::json::array();
  for (const auto& s : report.other_files) others.push_back(file_json(s));
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& f : report.findings) {
    findings.push_back({{"check", f.check},
                        {"kind", f.kind},
                        {"failed", f.failed},
                        {"shard", f.shard},
                        {"tensor", f.tensor},
                        {"expected", f.expected},
                        {"found", f.found},
                        {"message", f.message},
                        {"layer", f.layer}});
  }
  nlohmann::json out = {{"dir", report.dir},
                        {"ok", report.ok()},
                        {"n_failed", report.n_failed()},
                        {"sharded", report.sharded},
                        {"n_tensors", report.n_tensors},
                        {"shards", shards},
                        {"other_files", others},
                        {"findings", findings},
                        {"bytes_hashed", report.bytes_hashed},
                        {"tensors_value_checked", report.n_values_checked},
                        {"hash_source", report.hash_source},
                        {"hashes_written", report.hashes_written}};
  if (report.n_manifest_tensors >= 0) {
    out["n_manifest_tensors"] = report.n_manifest_tensors;
    out["n_mtp_tensors"] = report.n_mtp_tensors;
  }
  return out;
}

std::string format_verify_report(const VerifyReport& report, size_t max_listed) {
  std::string out = fmt::format("Checkpoint {} ({}, {} shard{}, {} tensors)\n\n", report.dir,
                                report.sharded ? "sharded" : "single file", report.shards.size(),
                                report.shards.size() == 1 ? "" : "s", report.n_tensors);
  size_t name_width = 4;
  for (const auto& s : report.shards) name_width = std::max(name_width, s.name.size());
  for (const auto& s : report.other_files) name_width = std::max(name_width, s.name.size());
  out += fmt::format("{}  {:>10}  {:>7}  {:<11}  {}\n", pad("file", name_width), "size", "tensors",
                     "structure", "sha256");
  auto row = [&](const ShardReport& s, bool shard) {
    const bool present = s.status != "missing";
    out += fmt::format("{}  {:>10}  {:>7}  {:<11}  {}\n", pad(s.name, name_width),
                       present ? human_bytes(static_cast<double>(s.file_size)) : "-",
                       shard && present ? std::to_string(s.n_tensors) : "-", shard ? s.status : "-",
                       s.hash_status);
  };
  for (const auto& s : report.shards) row(s, true);
  for (const auto& s : report.other_files) row(s, false);

  if (!report.findings.empty()) {
    const int failed = report.n_failed();
    out += fmt::format("\nFindings ({} failed, {} note{}):\n", failed,
                       report.findings.size() - static_cast<size_t>(failed),
                       report.findings.size() - static_cast<size_t>(failed) == 1 ? "" : "s");
    std::map<std::string, size_t> shown;
    std::map<std::string, size_t> hidden;
    // Extra tensors of one layer past the model's last (MTP modules hold hundreds) read best as one line.
    std::map<std::pair<bool, int64_t>, std::vector<const Finding*>> extra_layers;
    for (const auto& f : report.findings) {
      if (f.kind == "extra_tensor" && f.layer >= 0) extra_layers[{f.failed, f.layer}].push_back(&f);
    }
    auto grouped = [&](const Finding& f) {
      const auto it = extra_layers.find({f.failed, f.layer});
      return f.kind == "extra_tensor" && f.layer >= 0 && it != extra_layers.end() && it->second.size() > 1;
    };
    // Failures first, then notes; each kind listed up to max_listed times.
    for (const bool want_failed : {true, false}) {
      for (const auto& f : report.findings) {
        if (f.failed != want_failed) continue;
        if (grouped(f)) {
          const auto& group = extra_layers[{f.failed, f.layer}];
          if (group.front() != &f) continue;
          std::set<std::string> shards;
          for (const Finding* g : group) shards.insert(g->shard);
          out += fmt::format("  {}  {:<20} layer {}: {} tensors ('{}', ...) in {}: {}\n",
                             f.failed ? "FAIL" : "note", f.kind, f.layer, group.size(), f.tensor,
                             fmt::join(shards, ", "), f.message);
          continue;
        }
        if (shown[f.kind]++ < max_listed) {
          out += finding_line(f) + "\n";
        } else {
          ++hidden[f.kind];
        }
      }
    }
    for (const auto& [kind, n] : hidden) out += fmt::format("  ... and {} more {} (see --json)\n", n, kind);
  }

  std::map<std::string, int> by_check;
  for (const auto& f : report.findings) {
    if (f.failed) ++by_check[f.check];
  }
  std::string checks;
  for (const auto& [check, n] : by_check)
    checks += fmt::format("{}{} {}", checks.empty() ? "" : ", ", check, n);
  out += "\n";
  if (report.ok()) {
    out += "Summary: OK";
  } else {
    out += fmt::format("Summary: FAILED: {} check{} failed ({})", report.n_failed(),
                       report.n_failed() == 1 ? "" : "s", checks);
  }
  if (report.n_manifest_tensors >= 0) {
    out += fmt::format("; {} tensors in the checkpoint, {} expected by the model", report.n_tensors,
                       report.n_manifest_tensors);
    if (report.n_mtp_tensors > 0) {
      out += fmt::format(" ({} of them multi-token-prediction, not read by decoding)", report.n_mtp_tensors);
    }
  } else {
    out += fmt::format("; {} tensors (structure checked without a model config)", report.n_tensors);
  }
  if (!report.hash_source.empty()) {
    out += fmt::format("; {} hashed against {}", human_bytes(static_cast<double>(report.bytes_hashed)),
                       report.hash_source);
  } else if (report.bytes_hashed > 0) {
    out += fmt::format("; {} hashed, no hash list to compare with",
                       human_bytes(static_cast<double>(report.bytes_hashed)));
  }
  if (report.n_values_checked >= 0) {
    out += fmt::format("; values of {} tensors scanned (NaN, Inf, |x| > {:g})", report.n_values_checked,
                       kAbsurdWeightMagnitude);
  }
  if (!report.hashes_written.empty()) out += "; wrote " + report.hashes_written;
  out += "\n";
  return out;
}

}  // namespace day0
