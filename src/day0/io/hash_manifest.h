#pragma once
// Expected shard hashes from the places a release publishes them:
//  - a `sha256sum`-format file (SHA256SUMS): "<64 hex>  <name>" or "<64 hex> *<name>" per line;
//  - Git LFS pointer files ("version https://git-lfs.github.com/spec/v1", "oid sha256:<hex>", "size <n>"),
//    one per shard, as a Hugging Face clone without LFS leaves them; a directory of them or one file;
//  - a JSON map {"<name>": "<hex>"} or {"<name>": {"sha256": "<hex>", "size": n}}, or the Hugging Face
//    API's {"siblings": [{"rfilename": "<name>", "lfs": {"sha256": "<hex>", "size": n}}]}.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "day0/core/status.h"

namespace day0 {

inline constexpr const char* kSha256SumsName = "SHA256SUMS";

struct ExpectedHash {
  std::string sha256;            // 64 lower-case hex digits
  std::optional<uint64_t> size;  // when the source states it (LFS pointers, HF API)
  std::string source;            // file it came from, for messages
};

// File name (relative to the checkpoint directory, no leading "./") -> expected hash.
using HashManifest = std::map<std::string, ExpectedHash>;

Result<HashManifest> parse_sha256sums(std::string_view text, const std::string& source);
Result<ExpectedHash> parse_lfs_pointer(std::string_view text, const std::string& source);
bool looks_like_lfs_pointer(std::string_view text);
Result<HashManifest> parse_hash_json(std::string_view text, const std::string& source);

// `path` is a SHA256SUMS-style file, a JSON map, a single LFS pointer (named after its shard) or a
// directory of LFS pointer files. The kind is recognised from the content.
Result<HashManifest> load_hash_manifest(const std::string& path);

// "<hex>  <name>\n" per entry, sorted by name; written to a temp file then renamed.
std::string format_sha256sums(const std::map<std::string, std::string>& digests);
Status write_sha256sums(const std::string& path, const std::map<std::string, std::string>& digests);

}  // namespace day0
