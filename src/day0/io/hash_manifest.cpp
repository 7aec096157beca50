#include "day0/io/hash_manifest.h"

#include "day0/core/json_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace day0 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxManifestBytes = 64u << 20;

Result<std::string> normalise_hex(std::string_view hex, const std::string& where) {
  std::string out(hex);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  const bool ok = out.size() == 64 && std::all_of(out.begin(), out.end(), [](char c) {
                    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                  });
  if (!ok)
    return parse_error(where + ": expected 64 hex digits of SHA-256, found '" + std::string(hex) + "'");
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string clean_name(std::string_view name) {
  while (name.substr(0, 2) == "./") name.remove_prefix(2);
  return std::string(name);
}

Result<std::string> slurp(const std::string& path) {
  return read_bounded_file(path, kMaxManifestBytes);
}

Result<ExpectedHash> json_entry(const json& value, const std::string& where, const std::string& source) {
  ExpectedHash hash;
  hash.source = source;
  const json* digest = &value;
  if (value.is_object()) {
    const auto it = value.find("sha256");
    if (it == value.end()) return parse_error(where + ": missing 'sha256'");
    digest = &*it;
    if (const auto size = value.find("size"); size != value.end()) {
      if (!size->is_number_unsigned()) return parse_error(where + ".size: expected a non-negative integer");
      hash.size = size->get<uint64_t>();
    }
  }
  if (!digest->is_string()) return parse_error(where + ": expected a hex string");
  D0_ASSIGN_OR_RETURN(hash.sha256, normalise_hex(digest->get<std::string>(), where));
  return hash;
}

}  // namespace

Result<HashManifest> parse_sha256sums(std::string_view text, const std::string& source) {
  HashManifest out;
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (trim(line).empty() || trim(line).front() == '#') continue;
    const std::string where = fmt::format("{}:{}", source, line_no);
    // "<hex><space><space or *><name>", the format sha256sum writes and checks.
    if (line.size() < 67 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*')) {
      return parse_error(where + ": expected '<64 hex digits>  <file name>'");
    }
    D0_ASSIGN_OR_RETURN(auto hex, normalise_hex(line.substr(0, 64), where));
    const std::string name = clean_name(line.substr(66));
    out[name] = ExpectedHash{hex, std::nullopt, source};
  }
  return out;
}

bool looks_like_lfs_pointer(std::string_view text) {
  return text.substr(0, 8) == "version " && text.find("git-lfs") != std::string_view::npos &&
         text.size() < 1024;
}

Result<ExpectedHash> parse_lfs_pointer(std::string_view text, const std::string& source) {
  if (!looks_like_lfs_pointer(text)) return parse_error(source + ": not a Git LFS pointer file");
  ExpectedHash hash;
  hash.source = source;
  bool have_oid = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.substr(0, 11) == "oid sha256:") {
      D0_ASSIGN_OR_RETURN(hash.sha256, normalise_hex(line.substr(11), source + ": oid"));
      have_oid = true;
    } else if (line.substr(0, 5) == "size ") {
      uint64_t size = 0;
      const auto digits = line.substr(5);
      const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), size);
      if (ec != std::errc() || ptr != digits.data() + digits.size()) {
        return parse_error(source + ": size: expected a byte count, found '" + std::string(digits) + "'");
      }
      hash.size = size;
    }
  }
  if (!have_oid) return parse_error(source + ": LFS pointer without 'oid sha256:'");
  return hash;
}

Result<HashManifest> parse_hash_json(std::string_view text, const std::string& source) {
  D0_ASSIGN_OR_RETURN(json root, parse_json_text(text, source, JsonLimits{size_t{64} << 20, 16}));
  if (!root.is_object()) return parse_error(source + ": expected a JSON object");
  HashManifest out;
  if (const auto siblings = root.find("siblings"); siblings != root.end() && siblings->is_array()) {
    for (const auto& s : *siblings) {
      if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
      const auto lfs = s.find("lfs");
      if (lfs == s.end()) continue;  // small files kept in git carry no LFS hash
      const std::string name = s["rfilename"].get<std::string>();
      D0_ASSIGN_OR_RETURN(out[clean_name(name)], json_entry(*lfs, source + ": siblings." + name, source));
    }
    return out;
  }
  for (const auto& [name, value] : root.items()) {
    D0_ASSIGN_OR_RETURN(out[clean_name(name)], json_entry(value, source + ": " + name, source));
  }
  return out;
}

Result<HashManifest> load_hash_manifest(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    HashManifest out;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      if (!entry.is_regular_file(ec) || entry.file_size(ec) > 1024) continue;
      D0_ASSIGN_OR_RETURN(auto text, slurp(entry.path().string()));
      if (!looks_like_lfs_pointer(text)) continue;
      D0_ASSIGN_OR_RETURN(out[entry.path().filename().string()],
                          parse_lfs_pointer(text, entry.path().string()));
    }
    if (out.empty()) return not_found(path + ": no Git LFS pointer files in this directory");
    return out;
  }
  D0_ASSIGN_OR_RETURN(auto text, slurp(path));
  const std::string_view body = trim(text);
  if (looks_like_lfs_pointer(body)) {
    HashManifest out;
    D0_ASSIGN_OR_RETURN(out[fs::path(path).filename().string()], parse_lfs_pointer(body, path));
    return out;
  }
  if (!body.empty() && body.front() == '{') return parse_hash_json(body, path);
  return parse_sha256sums(text, path);
}

std::string format_sha256sums(const std::map<std::string, std::string>& digests) {
  std::string out;
  for (const auto& [name, hex] : digests) out += hex + "  " + name + "\n";
  return out;
}

Status write_sha256sums(const std::string& path, const std::map<std::string, std::string>& digests) {
  const std::string text = format_sha256sums(digests);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error(tmp + ": cannot create");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return io_error(path + ": cannot write");
  }
  return Status::ok();
}

}  // namespace day0
