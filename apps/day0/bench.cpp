// day0 bench MODEL: llama-bench's pp / tg tests and TTFT on a checkpoint, beside the machine's limits
// measured in the same run (runtime/speed_bench.h).
// day0 bench serve: load an OpenAI-compatible server (ours or another) with streamed completions and
// report throughput and latency percentiles (serve/bench_client.h).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "command.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/backends/thread_pool.h"
#include "day0/core/atomic_file.h"
#include "day0/core/human.h"
#include "day0/io/mapped_file.h"
#include "day0/model/param_count.h"
#include "day0/runtime/draft_model.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "day0/runtime/mtp_drafter.h"
#include "day0/runtime/speculative.h"
#include "day0/runtime/speed_bench.h"
#include "day0/serve/bench_client.h"
#include "day0/serve/soak.h"
#include "spec_flags.h"

namespace day0::cli {
namespace {

struct BenchArgs {
  serve::BenchOptions options;
  std::string prompt_len = "32";
  std::string output_len = "64";
  bool json = false;
  std::string soak;  // DURATION: a soak instead of one run
  double sample_every = 10;
  int server_pid = 0;
  double max_rss_slope = 0.5;
  std::string samples_csv;
};

// "90", "90s", "15m", "24h" -> seconds; -1 when malformed.
double parse_duration(const std::string& text) {
  if (text.empty()) return -1;
  double unit = 1;
  std::string number = text;
  switch (text.back()) {
    case 's':
      number.pop_back();
      break;
    case 'm':
      unit = 60;
      number.pop_back();
      break;
    case 'h':
      unit = 3600;
      number.pop_back();
      break;
    default:
      break;
  }
  try {
    size_t used = 0;
    const double v = std::stod(number, &used);
    if (used != number.size() || !(v > 0) || v * unit > 30 * 24 * 3600.0) return -1;
    return v * unit;
  } catch (const std::exception&) {
    return -1;
  }
}

int bench_soak(BenchArgs& a) {
  const char* name = "bench serve --soak";
  serve::SoakOptions o;
  o.load = a.options;
  o.duration_s = parse_duration(a.soak);
  if (o.duration_s <= 0) {
    return report_error(name,
                        invalid_argument(fmt::format("--soak {:?}: expected a duration such as 3600, 90s, "
                                                     "15m or 24h (at most 30 days)",
                                                     a.soak)));
  }
  o.sample_every_s = a.sample_every;
  o.server_pid = a.server_pid;
  o.max_rss_slope_mb_per_min = a.max_rss_slope;
  if (o.server_pid > 0 && !std::filesystem::exists(fmt::format("/proc/{}/status", o.server_pid)))
    return report_error(
        name, not_found(fmt::format("--server-pid {}: no such process on this host", o.server_pid)));
  if (!a.json) {
    fmt::print("soak  {} for {:.0f} s, rounds of {} requests at concurrency {}, a sample every {:.0f} s{}\n",
               o.load.url, o.duration_s, o.load.requests, o.load.concurrency, o.sample_every_s,
               o.server_pid > 0 ? fmt::format(", server pid {}", o.server_pid)
                                : std::string(", no --server-pid: "
                                              "no memory, threads or files"));
    std::fflush(stdout);
  }
  auto r = serve::run_soak(o);
  if (!r.is_ok()) return report_error(name, r.status());
  if (!a.samples_csv.empty()) {
    std::string csv = "t_s,rss_mb,threads,open_files,kv_used_blocks,e2e_p50_s,e2e_p99_s,requests,failed\n";
    for (const serve::SoakSample& s : r->samples) {
      csv += fmt::format("{:.3f},{:.3f},{},{},{},{:.6f},{:.6f},{},{}\n", s.t_s, s.rss_mb, s.threads,
                         s.open_files, s.kv_used_blocks, s.e2e_p50_s, s.e2e_p99_s, s.requests, s.failed);
    }
    if (auto st = write_file_atomic(a.samples_csv, csv); !st.is_ok()) return report_error(name, st);
  }
  if (a.json) {
    nlohmann::json j = serve::to_json(*r);
    j["url"] = o.load.url;
    j["duration_s"] = o.duration_s;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{:>9} {:>9} {:>8} {:>6} {:>9} {:>10} {:>10} {:>9}\n", "t (s)", "RSS (MB)", "threads", "files",
               "KV used", "e2e p50", "e2e p99", "requests");
    auto num = [](double v, int digits) {
      return v < 0 ? std::string("-") : fmt::format("{:.{}f}", v, digits);
    };
    for (const serve::SoakSample& s : r->samples) {
      fmt::print("{:>9.1f} {:>9} {:>8} {:>6} {:>9} {:>8.1f}ms {:>8.1f}ms {:>9}\n", s.t_s, num(s.rss_mb, 1),
                 num(s.threads, 0), num(s.open_files, 0), num(s.kv_used_blocks, 0), 1e3 * s.e2e_p50_s,
                 1e3 * s.e2e_p99_s, s.requests);
    }
    std::vector<double> t, rss;
    for (const serve::SoakSample& s : r->samples) t.push_back(s.t_s), rss.push_back(s.rss_mb);
    if (const std::string plot = serve::text_plot(t, rss); !plot.empty()) {
      fmt::print("resident memory (MB) over the soak:\n{}", plot);
    }
    const serve::SoakSlopes& k = r->slopes;
    fmt::print(
        "slopes over the second half, per minute: RSS {:+.3f} MB, threads {:+.2f}, open files {:+.2f}, "
        "KV blocks {:+.1f}, e2e p50 {:+.2f} ms\n",
        k.rss_mb, k.threads, k.open_files, k.kv_used_blocks, 1e3 * k.e2e_p50_s);
    fmt::print("requests {} ({} failed)\n", r->requests, r->failed);
    if (r->short_streams > 0)
      fmt::print(
          "short streams {} (fewer chunks than their usage's tokens, counted by the usage; first: {})\n",
          r->short_streams, r->first_short_stream);
    fmt::print("verdict: {}\n", r->verdict);
  }
  return r->pass ? kExitOk : kExitCheckFailed;
}

struct BenchModelArgs {
  std::string model;
  std::vector<int64_t> prompt{512};
  std::vector<int64_t> gen{128};
  int repetitions = 5;
  std::string backend = "cpu";
  std::string dtype = "bf16";
  std::string kv_dtype = "bf16";
  std::string page_cache = "keep";
  int threads = 0;
  uint64_t seed = 0;
  bool no_limits = false;
  bool json = false;
  SpecFlags spec;
};

// --spec: each tg length decoded greedily from the same one-token prompt by plain decoding and by
// speculative decoding (generate_batch and generate_speculative, as `run` decodes), each after a
// warm-up, alternating run by run so that the machine's drift falls on both alike.
struct SpecBenchTest {
  std::string name;  // "tg128"
  int64_t tokens = 0;
  std::vector<double> plain_tok_s, spec_tok_s;  // decode tok/s of each measured run
  SpecStats stats;                              // the measured runs' drafts, summed
  bool same_tokens = true;                      // every run gave plain decoding's tokens
};

// `draft`: self-int4's draft engine (a ModelDrafter each run), or null: the engine's own MTP layers under
// --spec mtp (an MtpDrafter each run), else n-gram lookup.
Result<std::vector<SpecBenchTest>> run_spec_bench(Engine& engine, Engine* draft, const BenchModelArgs& a) {
  std::vector<SpecBenchTest> out;
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int32_t> pick(
      0, static_cast<int32_t>(std::max<int64_t>(1, engine.spec().vocab_size) - 1));
  for (int64_t n : a.gen) {
    SpecBenchTest t;
    t.name = fmt::format("tg{}", n);
    t.tokens = n;
    const std::vector<int32_t> prompt{pick(rng)};
    for (int run = 0; run <= a.repetitions; ++run) {  // run 0: the warm-up
      GenerationRequest r;
      r.prompt = prompt;
      r.max_new = n;
      auto plain = generate_batch(engine, std::span(&r, 1));
      if (!plain.is_ok()) return plain.status().with_context(t.name);
      std::unique_ptr<Drafter> drafter;
      if (draft != nullptr) {
        drafter = std::make_unique<ModelDrafter>(*draft);
      } else if (a.spec.draft_source() == DraftSource::kMtp) {
        drafter = std::make_unique<MtpDrafter>(engine);
      } else {
        drafter = std::make_unique<NgramDrafter>();
      }
      auto spec = generate_speculative(engine, r, *drafter, SpecOptions{.tokens = a.spec.tokens});
      if (!spec.is_ok()) return spec.status().with_context(t.name + " --spec");
      if (run == 0) continue;
      t.plain_tok_s.push_back((*plain)[0].decode_tokens_per_second());
      t.spec_tok_s.push_back(spec->result.decode_tokens_per_second());
      t.same_tokens = t.same_tokens && (*plain)[0].tokens() == spec->result.tokens();
      const SpecStats& st = spec->stats;
      t.stats.verify_steps += st.verify_steps;
      t.stats.drafted += st.drafted;
      t.stats.accepted += st.accepted;
      t.stats.draft_seconds += st.draft_seconds;
      t.stats.position_drafted.resize(st.position_drafted.size(), 0);
      t.stats.position_accepted.resize(st.position_accepted.size(), 0);
      for (size_t i = 0; i < st.position_drafted.size(); ++i) {
        t.stats.position_drafted[i] += st.position_drafted[i];
        t.stats.position_accepted[i] += st.position_accepted[i];
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

// How the checkpoint's files were mapped while the tests ran: 2 MiB page-table entries let decoding
// stream the weights faster than 4 KiB ones, and the page cache decides which a file gets.
struct WeightMapping {
  uint64_t file_bytes = 0;       // the checkpoint's safetensors files
  uint64_t huge_page_bytes = 0;  // of this process's file mappings, in 2 MiB entries after the tests
};

WeightMapping weight_mapping(const std::string& folder) {
  WeightMapping w;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    if (entry.path().extension() == ".safetensors") w.file_bytes += entry.file_size(ec);
  }
  w.huge_page_bytes = file_bytes_in_huge_pages();
  return w;
}

nlohmann::json speed_json(const BenchModelArgs& a, const LoadedModel& m, const ParamCounts& params,
                          const std::string& simd, int threads, const SpeedBenchResult& r,
                          const WeightMapping& mapping) {
  nlohmann::json tests = nlohmann::json::array();
  for (const auto& t : r.tests) {
    nlohmann::json j = {{"test", t.name},
                        {"kind", t.kind == SpeedTestKind::kPrompt ? "prompt" : "generate"},
                        {"tokens", t.tokens},
                        {"tok_s_mean", t.mean_tok_s},
                        {"tok_s_stdev", t.stdev_tok_s},
                        {"tok_s_samples", t.tok_s},
                        {"seconds_samples", t.seconds},
                        {"forward_calls", t.forward_calls}};
    if (t.kind == SpeedTestKind::kPrompt) j["ttft_s_mean"] = t.mean_ttft_seconds;
    if (r.limits.measured) {
      j["limit_tok_s"] = t.limit_tok_s;
      j["limit"] =
          t.kind == SpeedTestKind::kPrompt ? r.limits.prefill_peak_name : std::string("read bandwidth");
      j["share_of_limit"] = t.share_of_limit;
    }
    tests.push_back(std::move(j));
  }
  nlohmann::json out = {{"model", a.model},
                        {"architecture", m.spec.architecture},
                        {"params", params.total},
                        {"active_params", params.active},
                        {"weight_format", weight_format_name(m.spec.weights.format)},
                        {"weight_bytes_per_token", r.weight_bytes_per_token},
                        {"matmul_flops_per_token", r.matmul_flops_per_token},
                        {"backend", a.backend},
                        {"simd", simd},
                        {"threads", threads},
                        {"dtype", a.dtype},
                        {"kv_dtype", a.kv_dtype},
                        {"repetitions", a.repetitions},
                        {"seed", a.seed},
                        {"page_cache", a.page_cache},
                        {"weight_file_bytes", mapping.file_bytes},
                        {"weight_bytes_in_huge_pages", mapping.huge_page_bytes},
                        {"tests", tests}};
  if (r.limits.measured) {
    out["machine"] = {{"threads", r.limits.threads},
                      {"read_gbps", r.limits.read_gbps},
                      {"fma_peak_gflops", r.limits.fma_gflops},
                      {"bf16_dot_peak_gflops", r.limits.bf16_gflops},
                      {"fma_avx2_peak_gflops", r.limits.fma_avx2_gflops},
                      {"amx_bf16_peak_gflops", r.limits.amx_bf16_gflops},
                      {"int8_vnni_peak_gops", r.limits.int8_vnni_gops},
                      {"amx_int8_peak_gops", r.limits.amx_int8_gops},
                      {"prefill_peak", r.limits.prefill_peak_name},  // the name under its first key
                      {"prefill_peak_name", r.limits.prefill_peak_name},
                      {"prefill_peak_gflops", r.limits.prefill_peak_gflops}};
  }
  return out;
}

std::string plural(int64_t n, const char* noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

void print_speed_table(const BenchModelArgs& a, const LoadedModel& m, const ParamCounts& params,
                       const std::string& simd, int threads, const SpeedBenchResult& r,
                       const WeightMapping& mapping) {
  fmt::print(
      "bench  {}: {}, {} parameters ({} active), {} weights; {} backend{}, {}, {} activations, "
      "{} KV cache, {} a test after a warm-up\n",
      a.model, m.spec.architecture, human_count(static_cast<double>(params.total)),
      human_count(static_cast<double>(params.active)),
      weight_format_name(m.stored_spec.weights.projection_format()), a.backend,
      simd.empty() ? "" : " (" + simd + ")", plural(threads, "thread"), a.dtype, a.kv_dtype,
      plural(a.repetitions, "run"));
  if (r.limits.measured) {
    const auto peak = [](const char* name, double gflops, const char* ops) {
      return gflops > 0 ? fmt::format(", {} peak {:.0f} G{}/s", name, gflops, ops) : std::string();
    };
    fmt::print(
        "machine (measured now, {}): read bandwidth {:.1f} GB/s{}{}{}{}{}{}\n",
        plural(r.limits.threads, "thread"), r.limits.read_gbps, peak("FP32 FMA", r.limits.fma_gflops, "FLOP"),
        peak("FP32 FMA (AVX2)", r.limits.fma_avx2_gflops, "FLOP"),
        peak("BF16 dot", r.limits.bf16_gflops, "FLOP"), peak("AMX BF16", r.limits.amx_bf16_gflops, "FLOP"),
        peak("INT8 VNNI", r.limits.int8_vnni_gops, "OP"), peak("AMX INT8", r.limits.amx_int8_gops, "OP"));
    fmt::print("prefill's matmuls run on: {}{}\n", r.limits.prefill_peak_name,
               r.limits.prefill_peak_gflops > 0 ? "" : " (no peak loop for this unit: no prefill limit)");
  }
  fmt::print("a token reads {} of weights and multiplies by them: {:.4g} GFLOP of matmuls\n",
             human_bytes(r.weight_bytes_per_token), r.matmul_flops_per_token / 1e9);
  if (mapping.file_bytes > 0) {
    const bool most =
        static_cast<double>(mapping.huge_page_bytes) >= 0.75 * static_cast<double>(mapping.file_bytes);
    fmt::print("weights mapped in 2 MiB pages: {} of {} of files{}\n", human_bytes(mapping.huge_page_bytes),
               human_bytes(mapping.file_bytes),
               most || a.page_cache == "reload"
                   ? ""
                   : " (the rest sit in 4 KiB pages, which decoding streams slower: --page-cache reload)");
  }
  fmt::print("\n");
  fmt::print("| {:<8} | {:>22} | {:>10} | {:>24} | {:>8} |\n", "test", "t/s", "TTFT ms", "limit t/s",
             "of limit");
  fmt::print("|{:-<10}|{:->24}|{:->12}|{:->26}|{:->10}|\n", "", "", "", "", "");
  for (const auto& t : r.tests) {
    const std::string ttft =
        t.kind == SpeedTestKind::kPrompt ? fmt::format("{:.1f}", 1e3 * t.mean_ttft_seconds) : std::string();
    std::string limit, share;
    if (r.limits.measured && t.limit_tok_s > 0) {
      limit = fmt::format("{:.1f} ({})", t.limit_tok_s,
                          t.kind == SpeedTestKind::kPrompt ? r.limits.prefill_peak_name : "bandwidth");
      share = fmt::format("{:.2f}", t.share_of_limit);
    }
    fmt::print("| {:<8} | {:>22} | {:>10} | {:>24} | {:>8} |\n", t.name,
               fmt::format("{:.2f} ± {:.2f}", t.mean_tok_s, t.stdev_tok_s), ttft, limit, share);
  }
}

int bench_model(const BenchModelArgs& a) {
  const char* name = "bench";
  if (Status st = check_spec_flags(a.spec); !st.is_ok()) return report_error(name, st);
  EngineOptions eo;
  eo.precision = a.dtype == "bf16" ? ActivationPrecision::kBF16 : ActivationPrecision::kF32;
  const auto kv = parse_kv_dtype(a.kv_dtype);
  if (!kv)
    return report_error(name, invalid_argument(fmt::format("--kv-dtype: unknown KV dtype '{}'", a.kv_dtype)));
  eo.kv_dtype = *kv;
  eo.mtp_layers = a.spec.draft_source() == DraftSource::kMtp;  // their weights are bound only then
  LoadOptions load = load_options_for(eo.precision);
  load.page_cache = page_cache_from(a.page_cache);
  load.mtp_layers = eo.mtp_layers;
  auto model = load_model(a.model, load);
  if (!model.is_ok()) return report_error(name, model.status());
  auto params = count_params(model->spec);
  if (!params.is_ok()) return report_error(name, params.status());
  auto engine = open_engine(*model, a.backend, eo, a.threads);
  if (!engine.is_ok()) return report_error(name, engine.status());
  // Opened before the tests run: a bad draft fails at once.
  std::unique_ptr<SelfDraft> draft;
  if (a.spec.draft_source() == DraftSource::kSelfInt4) {
    auto opened = open_self_draft(*model, a.spec.draft, *engine->backend, eo);
    if (!opened.is_ok()) return report_error(name, opened.status());
    draft = std::move(opened).value();
  }
  std::string simd;
  if (a.backend == "cpu") {
    if (auto level = default_simd_level(); level.is_ok()) simd = simd_level_name(*level);
  }
  const int threads = a.threads > 0 ? a.threads : default_thread_count();
  SpeedBenchOptions o;
  o.prompt_tokens = a.prompt;
  o.gen_tokens = a.gen;
  o.repetitions = a.repetitions;
  o.seed = a.seed;
  o.measure_limits = !a.no_limits && a.backend == "cpu";
  o.limit_threads = threads;
  // The integer kernels read the packed codes: the checkpoint's bytes, not the dequantized ones.
  if (model->weights->int_projections.n > 0) o.stored_spec = &model->stored_spec;
  // Progress on stderr: one line a test (over-written in place on a terminal).
  const bool tty = isatty(STDERR_FILENO) != 0;
  o.progress = [tty](const std::string& test, int run, int runs) {
    const std::string what = run == 0 ? std::string("warm-up") : fmt::format("run {}/{}", run, runs);
    if (tty) {
      fmt::print(stderr, "\rbench: {} {}   ", test, what);
    } else if (run == 0) {
      fmt::print(stderr, "bench: {} ({} runs after a warm-up)\n", test, runs);
    }
  };
  auto r = run_speed_bench(*engine->engine, o);
  if (tty) fmt::print(stderr, "\r{:<40}\r", "");
  if (!r.is_ok()) return report_error(name, r.status());
  std::vector<SpecBenchTest> spec_tests;
  if (a.spec.source != "none") {
    fmt::print(stderr, "bench: speculative decoding ({}, {} drafts a step) beside plain decoding\n",
               a.spec.source, a.spec.tokens);
    auto tests = run_spec_bench(*engine->engine, draft ? draft->engine.get() : nullptr, a);
    if (!tests.is_ok()) return report_error(name, tests.status());
    spec_tests = std::move(*tests);
  }
  const WeightMapping mapping = weight_mapping(model->folder);
  if (a.json) {
    nlohmann::json j = speed_json(a, *model, *params, simd, threads, *r, mapping);
    for (const SpecBenchTest& t : spec_tests) {
      nlohmann::json s = serve::spec_stats_json(t.stats);
      s["test"] = t.name;
      s["source"] = a.spec.source;
      s["draft"] = a.spec.draft.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.spec.draft);
      s["tokens"] = a.spec.tokens;
      s["plain_tok_s_samples"] = t.plain_tok_s;
      s["spec_tok_s_samples"] = t.spec_tok_s;
      s["plain_tok_s_mean"] = mean_and_stdev(t.plain_tok_s).first;
      s["spec_tok_s_mean"] = mean_and_stdev(t.spec_tok_s).first;
      s["same_tokens"] = t.same_tokens;
      j["speculative"].push_back(std::move(s));
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    print_speed_table(a, *model, *params, simd, threads, *r, mapping);
    if (!spec_tests.empty()) {
      fmt::print(
          "\nspeculative decoding: {}, up to {} drafts a step, greedy from one token (decode t/s, as "
          "`run`)\n",
          a.spec.source, a.spec.tokens);
      fmt::print("| {:<8} | {:>16} | {:>16} | {:>7} | {:>11} |\n", "test", "plain t/s", "spec t/s", "speedup",
                 "same tokens");
      fmt::print("|{:-<10}|{:->18}|{:->18}|{:->9}|{:->13}|\n", "", "", "", "", "");
      for (const SpecBenchTest& t : spec_tests) {
        const auto [plain, plain_sd] = mean_and_stdev(t.plain_tok_s);
        const auto [spec, spec_sd] = mean_and_stdev(t.spec_tok_s);
        fmt::print("| {:<8} | {:>16} | {:>16} | {:>7.2f} | {:>11} |\n", t.name,
                   fmt::format("{:.2f} ± {:.2f}", plain, plain_sd),
                   fmt::format("{:.2f} ± {:.2f}", spec, spec_sd), plain > 0 ? spec / plain : 0.0,
                   t.same_tokens ? "yes" : "NO");
        fmt::print("  {}: {}\n", t.name, spec_summary(t.stats));
      }
    }
  }
  for (const SpecBenchTest& t : spec_tests) {
    if (!t.same_tokens)
      return report_error(name,
                          internal_error(fmt::format("{}: speculative decoding changed the tokens", t.name)));
  }
  return kExitOk;
}

int bench_serve(BenchArgs& a) {
  const char* name = "bench serve";
  auto prompt = serve::parse_length_dist(a.prompt_len);
  if (!prompt.is_ok()) return report_error(name, prompt.status().with_context("--prompt-len"));
  auto output = serve::parse_length_dist(a.output_len);
  if (!output.is_ok()) return report_error(name, output.status().with_context("--output-len"));
  a.options.prompt_len = *prompt;
  a.options.output_len = *output;
  auto r = serve::run_serve_bench(a.options);
  if (!r.is_ok()) return report_error(name, r.status());
  if (a.json) {
    nlohmann::json j = serve::to_json(*r);
    j["url"] = a.options.url;
    j["concurrency"] = a.options.concurrency;
    j["rate"] = a.options.rate;
    j["prompt_len"] = a.prompt_len;
    j["output_len"] = a.output_len;
    fmt::print("{}\n", j.dump(2));
  } else {
    auto ms = [](const serve::Percentiles& p) {
      return fmt::format("p50 {:8.2f}  p90 {:8.2f}  p99 {:8.2f}  mean {:8.2f} ms", 1e3 * p.p50, 1e3 * p.p90,
                         1e3 * p.p99, 1e3 * p.mean);
    };
    fmt::print("bench serve  {}  concurrency {}, {} requests, prompt {} tokens, output {} tokens, rate {}\n",
               a.options.url, a.options.concurrency, r->requests, a.prompt_len, a.output_len,
               a.options.rate > 0 ? fmt::format("{}/s", a.options.rate) : std::string("unbounded"));
    fmt::print("completed    {} ({} failed) in {:.2f} s\n", r->requests - r->failed, r->failed, r->seconds);
    fmt::print("throughput   {:.2f} requests/s, {:.1f} output tokens/s ({} prompt, {} output tokens)\n",
               r->request_throughput, r->output_throughput, r->prompt_tokens, r->output_tokens);
    fmt::print("TTFT         {}\nITL          {}\ne2e          {}\n", ms(r->ttft), ms(r->itl), ms(r->e2e));
    if (r->spec) fmt::print("speculative  {} (the server's /metrics over the run)\n", spec_summary(*r->spec));
    if (!r->first_error.empty()) fmt::print("first error  {}\n", r->first_error);
    if (r->short_streams > 0)
      fmt::print(
          "short        {} streams carried fewer chunks than their usage's tokens, counted by the "
          "usage (first: {})\n",
          r->short_streams, r->first_short_stream);
  }
  return r->failed > 0 ? kExitCheckFailed : kExitOk;
}

const Registrar kBenchCommand(
    "bench",
    "Benchmarks: `bench MODEL` runs llama-bench's pp / tg tests with the machine's limits beside them; "
    "`bench serve` loads an OpenAI-compatible server and reports throughput and latency",
    65, [](CLI::App& app) -> CommandRunner {
      auto a = std::make_shared<BenchArgs>();
      auto m = std::make_shared<BenchModelArgs>();
      app.require_subcommand(0, 1);
      app.add_option("model", m->model, "checkpoint folder (config.json + safetensors): the pp / tg tests");
      app.add_option("-p,--prompt", m->prompt, "prompt lengths, one pp test each (default 512)")
          ->delimiter(',')
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
      app.add_option("-n,--gen", m->gen, "generation lengths, one tg test each (default 128)")
          ->delimiter(',')
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
      app.add_option("-r,--repetitions", m->repetitions,
                     "measured runs of each test, after a warm-up (default 5)")
          ->check(CLI::Range(1, 1000));
      app.add_option("--backend", m->backend, "backend: cpu (default), reference");
      app.add_option(
             "--dtype", m->dtype,
             "activation precision: bf16 (default: BF16 weights run at their precision, as llama-bench "
             "runs them) or f32 (exact float32)")
          ->check(CLI::IsMember({"f32", "bf16"}));
      app.add_option("--kv-dtype", m->kv_dtype, "KV cache dtype: bf16 (default), f32, fp8");
      add_page_cache_option(app, m->page_cache);
      app.add_option("--threads", m->threads, "threads of the cpu backend (default: DAY0_THREADS or all)")
          ->check(CLI::Range(1, 1024));
      app.add_option("--seed", m->seed, "seed of the random prompt tokens (default 0)");
      app.add_flag("--no-limits", m->no_limits,
                   "skip the bandwidth and peak probes (a few seconds and up to 2 GiB of memory)");
      app.add_flag("--json", m->json, "JSON output");
      add_spec_flags(app, m->spec);
      CLI::App* s =
          app.add_subcommand("serve", "Streamed completions against a server: throughput, TTFT/ITL/e2e");
      serve::BenchOptions& o = a->options;
      s->add_option("--url", o.url, "server base URL (default http://127.0.0.1:8000)");
      s->add_option("--model", o.model, "model name (default: the first of /v1/models)");
      s->add_option("--api-key", o.api_key, "sent as 'Authorization: Bearer KEY'");
      s->add_option("--concurrency", o.concurrency, "requests in flight at once (default 1)")
          ->check(CLI::Range(1, 4096));
      s->add_option("--requests", o.requests, "requests in all (default 16)")->check(CLI::Range(1, 1 << 20));
      s->add_option("--prompt-len", a->prompt_len, "prompt tokens: N or LO:HI uniform (default 32)");
      s->add_option("--output-len", a->output_len, "generated tokens: N or LO:HI uniform (default 64)");
      s->add_option("--rate", o.rate, "arrivals per second, Poisson (default: as fast as slots free)")
          ->check(finite_number(0.0, 1e6, "--rate"));
      s->add_option("--max-token-id", o.max_token_id, "prompt token ids are drawn below this (default 200)")
          ->check(CLI::Range(11, 1 << 30));
      s->add_option("--seed", o.seed, "seed of prompts, lengths and arrivals (default 0)");
      s->add_option("--logprobs", o.logprobs,
                    "ask for log-probabilities: the chosen token's and N alternatives (default: none)")
          ->check(CLI::Range(0, 20));
      s->add_flag("--json", a->json, "JSON output");
      s->add_option(
          "--soak", a->soak,
          "soak for DURATION (3600, 90s, 15m, 24h): rounds of --requests until it is over, a sample of "
          "the server between rounds, slopes over the second half and a verdict (exit 1 on failure)");
      s->add_option("--sample-every", a->sample_every, "with --soak: seconds between samples (default 10)")
          ->check(finite_number(0.0, 86400.0, "--sample-every"));
      s->add_option(
           "--server-pid", a->server_pid,
           "with --soak: the server's pid on this host, for its resident memory, threads and open files")
          ->check(CLI::Range(1, 1 << 30));
      s->add_option(
           "--max-rss-slope", a->max_rss_slope,
           "with --soak: the most MB/min resident memory may grow over the second half (default 0.5)")
          ->check(finite_number(0.0, 1e6, "--max-rss-slope"));
      s->add_option("--samples-csv", a->samples_csv,
                    "with --soak: write every sample to this CSV file (for a plot)");
      return [a, m, s] {
        if (s->parsed() && !a->soak.empty()) return bench_soak(*a);
        if (s->parsed()) return bench_serve(*a);
        if (m->model.empty()) {
          return report_error("bench",
                              invalid_argument("give a checkpoint folder (day0 bench MODEL) or a subcommand "
                                               "(day0 bench serve); see day0 bench --help"));
        }
        return bench_model(*m);
      };
    });

}  // namespace
}  // namespace day0::cli
