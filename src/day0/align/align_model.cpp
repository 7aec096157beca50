#include "day0/align/align_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "day0/runtime/model_loader.h"
#include "day0/tokenizer/prompt_ids.h"

namespace day0 {

AlignThresholds AlignThresholdOverrides::apply(AlignThresholds t) const {
  if (max_abs_err_of_range) t.max_abs_err_of_range = *max_abs_err_of_range;
  if (kl_mean) t.kl_mean = *kl_mean;
  if (kl_max) t.kl_max = *kl_max;
  if (min_same_top1) t.min_same_top1 = *min_same_top1;
  if (max_ppl_ratio_dev) t.max_ppl_ratio_dev = *max_ppl_ratio_dev;
  if (greedy_top_n) t.greedy_top_n = *greedy_top_n;
  if (layer_cosine) t.layers.cosine_warn = *layer_cosine;
  if (layer_abs) t.layers.abs_floor = *layer_abs;
  return t;
}

namespace {

std::optional<ActivationPrecision> parse_precision(const std::string& name) {
  if (name == "f32") return ActivationPrecision::kF32;
  if (name == "bf16") return ActivationPrecision::kBF16;
  return std::nullopt;
}

std::optional<MlaMode> parse_mla(const std::string& name) {
  if (name == "auto") return MlaMode::kAuto;
  if (name == "naive") return MlaMode::kNaive;
  if (name == "absorbed") return MlaMode::kAbsorbed;
  return std::nullopt;
}

std::string mla_name(MlaMode mode) {
  return mode == MlaMode::kNaive ? "naive" : mode == MlaMode::kAbsorbed ? "absorbed" : "auto";
}

std::string spaced(std::string key) {
  std::replace(key.begin(), key.end(), '_', ' ');
  return key;
}

// The measured side's settings as they are being settled, with where each came from.
struct Settling {
  const ReferenceDump* dump = nullptr;  // set only when the dump records day0 engine settings
  std::vector<AlignSetting> settings;
  std::vector<std::string> warnings;

  // One setting: the flag when given, else the dump's when it records one align knows, else the
  // default. A given value that differs from the dump's is said, never silently kept.
  template <typename T, typename Parse, typename Name>
  T settle(const std::string& key, const std::optional<T>& given, const T& fallback, Parse parse, Name name) {
    const std::string recorded = dump != nullptr ? dump->value(key) : std::string();
    std::optional<T> from_dump;
    if (!recorded.empty()) {
      from_dump = parse(recorded);
      if (!from_dump) {
        warnings.push_back(fmt::format("the dump's {} \"{}\" is not one align knows: {} {} used", spaced(key),
                                       recorded, spaced(key), name(given.value_or(fallback))));
      }
    }
    AlignSetting s{key, "", "default"};
    T value = fallback;
    if (given) {
      value = *given;
      s.source = "flag";
      if (from_dump && name(*from_dump) != name(*given)) {
        std::string flag = "--" + key;
        std::replace(flag.begin(), flag.end(), '_', '-');
        warnings.push_back(
            fmt::format("{} {} differs from the dump's {} {}: the comparison measures that difference too",
                        flag, name(*given), spaced(key), name(*from_dump)));
      }
    } else if (from_dump) {
      value = *from_dump;
      s.source = "dump";
    }
    s.value = name(value);
    settings.push_back(std::move(s));
    return value;
  }

  // A dump made under mpirun summed partial results over ranks: one process adds them in another order.
  void note_distributed() {
    if (dump == nullptr) return;
    const std::string tp = dump->value("tp"), ep = dump->value("ep");
    if ((tp.empty() || tp == "1") && (ep.empty() || ep == "1")) return;
    std::string how = fmt::format("TP {} x EP {}", tp.empty() ? "1" : tp, ep.empty() ? "1" : ep);
    if (!dump->value("moe_combine").empty()) how += ", " + dump->value("moe_combine") + " combine";
    if (dump->value("dp_attention") == "true") how += ", attention data parallelism";
    if (dump->value("comm_overlap") == "true") how += ", communication overlap";
    warnings.push_back(fmt::format(
        "the dump was made under {}; align runs one process, so partial sums add up in another order", how));
  }
};

}  // namespace

Result<AlignReport> align_model(const AlignRequest& req) {
  std::optional<ReferenceDump> ref;
  if (!req.reference_path.empty()) {
    D0_ASSIGN_OR_RETURN(ReferenceDump d, read_reference_dump(req.reference_path));
    ref = std::move(d);
  } else if (!req.against_reference) {
    return invalid_argument("align needs --reference DUMP (or --against reference)");
  }
  Settling settling;
  if (ref && ref->has_engine_settings()) settling.dump = &*ref;
  auto same = [](const std::string& s) { return std::optional<std::string>(s); };
  auto text = [](const std::string& s) { return s; };
  const std::string backend = settling.settle<std::string>(
      "backend", req.backend.empty() ? std::nullopt : std::optional<std::string>(req.backend), "cpu", same,
      text);
  const ActivationPrecision precision =
      settling.settle("dtype", req.precision, ActivationPrecision::kF32, parse_precision,
                      [](ActivationPrecision p) { return std::string(precision_name(p)); });
  const KvDtype kv_dtype = settling.settle(
      "kv_dtype", req.kv_dtype, precision == ActivationPrecision::kF32 ? KvDtype::kF32 : KvDtype::kBF16,
      [](const std::string& s) { return parse_kv_dtype(s); },
      [](KvDtype k) { return std::string(kv_dtype_name(k)); });

  D0_ASSIGN_OR_RETURN(LoadedModel model, load_model(req.model, load_options_for(precision)));
  if (ref && ref->prompts.front().logits.cols != model.spec.vocab_size) {
    return invalid_argument(fmt::format("{}: logits have {} columns but the model's vocabulary is {}",
                                        req.reference_path, ref->prompts.front().logits.cols,
                                        model.spec.vocab_size));
  }
  MlaMode mla = req.mla.value_or(MlaMode::kAuto);
  // The MLA form is a setting only where there is MLA (or someone asked for one).
  if (model.spec.mla || req.mla || (settling.dump != nullptr && !settling.dump->value("mla").empty()))
    mla = settling.settle("mla", req.mla, MlaMode::kAuto, parse_mla, mla_name);
  settling.note_distributed();

  EngineOptions options;
  options.precision = precision;
  options.kv_dtype = kv_dtype;
  options.mla = mla;
  D0_ASSIGN_OR_RETURN(EngineHandle engine, open_engine(model, backend, options, req.n_threads));

  ReferenceDump baseline;
  std::string reference_text;
  if (req.against_reference) {
    if (!ref) {
      ReferenceDump prompts;
      std::vector<std::vector<int64_t>> ids;
      if (!req.prompt_ids.empty()) {
        D0_ASSIGN_OR_RETURN(ids, parse_prompt_ids(req.prompt_ids, model.spec.vocab_size));
      } else {
        ids = seeded_prompts(3, 12, model.spec.vocab_size, 1);
      }
      for (auto& p : ids) {
        ReferencePrompt rp;
        rp.input_ids = std::move(p);
        rp.greedy_ids.assign(static_cast<size_t>(req.greedy_steps), 0);
        rp.hidden[0] = FloatMatrix();  // ask for hidden states
        prompts.prompts.push_back(std::move(rp));
      }
      ref = std::move(prompts);
    }
    D0_ASSIGN_OR_RETURN(EngineHandle oracle, open_engine(model, "reference", options, 1));
    D0_ASSIGN_OR_RETURN(baseline, run_reference_prompts(*oracle.engine, *ref, "day0 reference backend"));
    reference_text = fmt::format("day0 reference backend ({} activations, {} KV cache)",
                                 precision_name(precision), kv_dtype_name(kv_dtype));
  } else {
    baseline = *ref;
    reference_text = fmt::format("{} ({}, {})", ref->producer(), ref->version(), ref->dtype());
  }
  D0_ASSIGN_OR_RETURN(const ReferenceDump mine,
                      run_reference_prompts(*engine.engine, baseline, "day0 " + backend));
  AlignReport report = compare_dumps(baseline, mine, req.thresholds.apply(default_thresholds(precision)));
  report.model = req.model;
  report.backend = backend;
  report.precision = precision_name(precision);
  report.kv_dtype = kv_dtype_name(kv_dtype);
  report.reference = reference_text;
  report.settings = std::move(settling.settings);
  report.settings_from_dump = settling.dump != nullptr;
  report.warnings = std::move(settling.warnings);
  return report;
}

}  // namespace day0
