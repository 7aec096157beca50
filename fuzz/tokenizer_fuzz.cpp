// libFuzzer target over the tokenizer pipeline and the Jinja template parser/renderer.
// First byte picks the mode: 0 = template source, 1 = text for a byte-level BPE (round trip must be
// exact), 2 = text and ids for a SentencePiece-style BPE with byte fallback. Nothing may crash, hang
// or leak; broken invariants trap.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "day0/tokenizer/byte_level.h"
#include "day0/tokenizer/chat_template.h"
#include "day0/tokenizer/tokenizer.h"
#include "day0/tokenizer/utf8.h"

namespace {

using day0::tokenizer::Tokenizer;
using nlohmann::json;

std::string fmt_hex(int b) {
  static const char* digits = "0123456789ABCDEF";
  return std::string("<0x") + digits[b >> 4] + digits[b & 15] + ">";
}

std::unique_ptr<Tokenizer> build(const json& j, const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << j.dump();
  auto parts = day0::tokenizer::load_tokenizer_json(path);
  std::filesystem::remove(path);
  if (!parts.is_ok()) __builtin_trap();
  return std::make_unique<Tokenizer>(std::move(*parts));
}

const Tokenizer& byte_level() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[day0::tokenizer::byte_to_char(static_cast<unsigned char>(b))] = b;
    const char* merges[] = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 t", "\xC4\xA0t h", "\xC4\xA0th e"};
    json merge_list = json::array();
    int next = 256;
    for (const char* m : merges) {
      const std::string s = m;
      const size_t sp = s.find(' ');
      vocab[s.substr(0, sp) + s.substr(sp + 1)] = next++;
      merge_list.push_back(s);
    }
    json j = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"ignore_merges", true}}},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           json::array(
               {{{"type", "Split"},
                 {"pattern",
                  {{"Regex",
                    R"((?i:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
                 {"behavior", "Isolated"}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"added_tokens",
         json::array(
             {{{"id", 300}, {"content", "<|x|>"}, {"special", true}},
              {{"id", 301}, {"content", "[y]"}, {"special", false}, {"lstrip", true}, {"rstrip", true}}})}};
    return build(j, "day0_fuzz_bl_");
  }();
  return *tok;
}

const Tokenizer& sentencepiece() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    json vocab = {{"<unk>", 0},
                  {"\xE2\x96\x81", 1},
                  {"a", 2},
                  {"b", 3},
                  {"\xE2\x96\x81"
                   "a",
                   4}};
    for (int b = 0; b < 256; ++b) vocab[fmt_hex(b)] = 10 + b;
    json j = {
        {"model",
         {{"type", "BPE"},
          {"vocab", vocab},
          {"merges", json::array({"\xE2\x96\x81 a"})},
          {"unk_token", "<unk>"},
          {"byte_fallback", true},
          {"fuse_unk", true}}},
        {"normalizer", {{"type", "NFKC"}}},
        {"pre_tokenizer",
         {{"type", "Metaspace"},
          {"replacement", "\xE2\x96\x81"},
          {"prepend_scheme", "first"},
          {"split", true}}},
        {"decoder",
         {{"type", "Sequence"},
          {"decoders",
           json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                        {{"type", "ByteFallback"}},
                        {{"type", "Fuse"}},
                        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
        {"added_tokens",
         json::array({{{"id", 5}, {"content", "[INST]"}, {"special", true}, {"normalized", false}}})}};
    return build(j, "day0_fuzz_spm_");
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      day0::tokenizer::ChatRequest req;
      req.messages =
          nlohmann::ordered_json::parse(R"([{"role":"system","content":"s"},{"role":"user","content":"hi"},
        {"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}])");
      req.tools =
          nlohmann::ordered_json::parse(R"([{"type":"function","function":{"name":"f","parameters":{}}}])");
      req.now = 0;
      auto out = day0::tokenizer::render_chat_template(input, req,
                                                       {{"bos_token", "<s>"}, {"eos_token", "</s>"}}, "fuzz");
      (void)out;
      break;
    }
    case 1: {
      const Tokenizer& tok = byte_level();
      const std::string text(input);
      const auto ids = tok.encode(text, {.split_special_tokens = (size & 1) != 0});
      if (tok.decode(ids) != day0::tokenizer::sanitize_utf8(text) && text.find("[y]") == std::string::npos)
        __builtin_trap();
      break;
    }
    default: {
      const Tokenizer& tok = sentencepiece();
      const auto ids = tok.encode(input, {.add_special_tokens = true});
      const std::string back = tok.decode(ids);
      if (!day0::tokenizer::is_valid_utf8(back)) __builtin_trap();
      std::vector<int32_t> raw;
      for (size_t i = 0; i + 2 <= input.size(); i += 2)
        raw.push_back(static_cast<int32_t>((data[1 + i] << 8) | data[2 + i]) - 100);
      if (!day0::tokenizer::is_valid_utf8(tok.decode(raw))) __builtin_trap();
      break;
    }
  }
  return 0;
}
