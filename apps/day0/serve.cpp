// day0 serve: the OpenAI-compatible server (src/day0/serve/). Parses the options, builds the served
// model, binds, and serves until SIGINT or SIGTERM, then shuts down gracefully and exits 0.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "command.h"
#include "day0/core/human.h"
#include "day0/dist/communicator.h"
#include "day0/serve/served_model.h"
#include "spec_flags.h"

namespace day0::cli {
namespace {

struct ServeArgs {
  serve::ServeSetup setup;
  std::string policy = "max-utilization";
  bool no_prefix_caching = false;
  double shutdown_timeout = 10.0;
  double request_timeout = 10.0;
  double keep_alive_timeout = 5.0;
  std::string weights = "checkpoint";
  std::string page_cache = "keep";
  SpecFlags spec;
  CLI::Option* spec_max_rows_option = nullptr;
};

// Rank 0 bound its port (or could not): every rank learns which, so that followers never wait for
// steps from a server that is not there.
Status agree_on_start(dist::Communicator& world, const Status& leader) {
  const int32_t mine = leader.is_ok() ? 0 : 1;
  std::vector<int32_t> all(static_cast<size_t>(world.size()));
  D0_RETURN_IF_ERROR(world.all_gather_of<int32_t>(std::span<const int32_t>(&mine, 1), all));
  if (!leader.is_ok()) return leader;
  for (size_t r = 0; r < all.size(); ++r) {  // rank 0, or any rank serving under DP-attention
    if (all[r] != 0) return failed_precondition(fmt::format("rank {} could not start its server", r));
  }
  return Status::ok();
}

// A follower (rank > 0): replays rank 0's steps until rank 0 shuts down.
int follow(serve::ServedModel& m) {
  const std::string name = fmt::format("serve (rank {})", m.groups.world->rank());
  if (Status st = agree_on_start(*m.groups.world, Status::ok()); !st.is_ok()) {
    fmt::print(stderr, "{}: not started: {}\n", name, st.to_string());
    return kExitBadInput;
  }
  if (Status st = serve::follow_steps(*m.engine, *m.groups.world, m.kv_blocks); !st.is_ok()) {
    dist::abort_world(report_error(name, st));
  }
  return kExitOk;
}

int serve_command(ServeArgs& a) {
  const char* name = "serve";
  if (a.weights != "checkpoint") {
    return report_error(name,
                        unsupported(fmt::format("--weights {}: serve runs the checkpoint's weights; quantize "
                                                "first with `day0 quantize` and serve that folder",
                                                a.weights)));
  }
  if (Status st = check_spec_flags(a.spec); !st.is_ok()) return report_error(name, st);
  if (a.spec_max_rows_option->count() > 0 && a.spec.source == "none")
    return report_error(name,
                        invalid_argument("--spec-max-rows needs --spec ngram or --spec self-int4, found "
                                         "--spec none"));
  a.setup.server.scheduler.spec = a.spec.draft_source();
  a.setup.server.scheduler.spec_tokens = a.spec.tokens;
  a.setup.spec_draft = a.spec.draft;
  if (Status st = serve::check_serve_spec(a.setup); !st.is_ok()) return report_error(name, st);
  // The engine settings' combination is checked before anything is loaded (open_served_model repeats it).
  if (auto checked = engine_options_from(a.setup.engine); !checked.is_ok()) {
    return report_error(name, checked.status());
  }
  a.setup.server.scheduler.policy = a.policy == "guaranteed-no-evict"
                                        ? serve::AdmissionPolicy::kGuaranteedNoEvict
                                        : serve::AdmissionPolicy::kMaxUtilization;
  a.setup.server.scheduler.prefix_caching = !a.no_prefix_caching;
  a.setup.server.shutdown_grace = std::chrono::milliseconds(static_cast<int64_t>(a.shutdown_timeout * 1000));
  a.setup.server.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(a.request_timeout * 1000));
  a.setup.server.keep_alive_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(a.keep_alive_timeout * 1000));

  // SIGINT / SIGTERM are taken by sigwait below, not by any thread the server starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  a.setup.page_cache = page_cache_from(a.page_cache);
  auto served = serve::open_served_model(a.setup);
  if (!served.is_ok()) return report_error(name, served.status());
  serve::ServedModel& m = **served;
  if (!m.serves()) return follow(m);
  if (m.lockstep) {
    // Another rank shutting down ends this one's serving too (serve/dp_lockstep.h): as if signalled.
    m.lockstep->on_peer_leaving([rank = m.groups.world->rank()] {
      fmt::print(stderr, "serve: rank {}: another rank is shutting down; so does this one\n", rank);
      kill(getpid(), SIGTERM);
    });
  }
  auto port = m.server->start();
  if (m.distributed()) {
    if (Status st = agree_on_start(*m.groups.world, port.status()); !st.is_ok())
      return report_error(name, st);
  }
  if (!port.is_ok()) return report_error(name, port.status());
  const serve::ServerOptions& so = m.server->options();
  const serve::SchedulerOptions& sc = so.scheduler;
  fmt::print(
      stderr,
      "serve: {} as '{}' ({} layers, {}, {} KV cache, {}), max {} sequences + {} waiting, {} tokens a step, "
      "KV pool {} blocks ({}), {}, prefix caching {}{}{}\n",
      m.model.folder, so.served_model_name, m.model.spec.n_layers, a.setup.engine.dtype,
      kv_dtype_name(m.engine->options().kv_dtype),
      m.tokenizer ? "tokenizer loaded" : "no tokenizer: token-id prompts only", sc.max_seqs, sc.max_waiting,
      sc.max_batch_tokens, sc.kv_blocks, human_bytes_binary(static_cast<double>(m.kv_bytes)),
      serve::policy_name(sc.policy), sc.prefix_caching ? "on" : "off",
      sc.spec == DraftSource::kNone
          ? std::string()
          : fmt::format(
                ", speculative decoding {} (up to {} drafts a step, {}{})", draft_source_name(sc.spec),
                sc.spec_tokens,
                sc.spec_max_rows > 0 ? fmt::format("at most {} verified rows a step", sc.spec_max_rows)
                                     : std::string("no draft-row cap"),
                m.draft_kv_blocks > 0 ? fmt::format(", draft KV pool {} blocks ({})", m.draft_kv_blocks,
                                                    human_bytes_binary(static_cast<double>(m.draft_kv_bytes)))
                                      : std::string()),
      so.api_key.empty() ? "" : ", API key required");
  if (m.lockstep) {
    fmt::print(
        stderr,
        "serve: {} under mpirun, attention data-parallel: rank {} of {} serves its own requests on port "
        "{} (each rank on its own port), MoE layers meet the other ranks' steps\n",
        a.setup.engine.layout.to_string(), m.groups.world->rank(), m.groups.world->size(), *port);
  } else if (m.distributed()) {
    fmt::print(stderr,
               "serve: {} under mpirun: this rank (0) serves HTTP and schedules; the others follow its "
               "steps with their shards\n",
               a.setup.engine.layout.to_string());
  }
  if (!m.prefix_caching_off.empty())
    fmt::print(stderr, "serve: prefix caching off: {}\n", m.prefix_caching_off);
  if (m.state_bytes_per_sequence > 0) {
    // A running sequence holds its live state and a snapshot at its last whole block; the prefix cache
    // keeps at most --max-seqs snapshots.
    const auto state = static_cast<double>(m.state_bytes_per_sequence);
    fmt::print(stderr,
               "serve: recurrent state (beside the KV pool): {} a sequence, up to twice that while it runs "
               "(live + snapshot at its last whole block), {} at --max-seqs {}; the prefix cache holds up "
               "to {} snapshots ({}) more\n",
               human_bytes_binary(state), human_bytes_binary(2 * state * static_cast<double>(sc.max_seqs)),
               sc.max_seqs, sc.max_seqs, human_bytes_binary(state * static_cast<double>(sc.max_seqs)));
  }
  fmt::print("listening on http://{}:{}\n", so.host, *port);
  std::fflush(stdout);

  std::thread http([&] { m.server->serve(); });
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  fmt::print(stderr, "serve: {} received: no new requests; running ones get {:.0f} s to finish\n",
             signal_number == SIGINT ? "SIGINT" : "SIGTERM", a.shutdown_timeout);
  // The grace period runs on its own thread so that a second signal can cut it short.
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    m.server->shutdown();
    stopped = true;
  });
  const timespec poll{0, 100'000'000};
  while (!stopped) {
    if (sigtimedwait(&stop_signals, nullptr, &poll) > 0) {
      fmt::print(stderr, "serve: second signal: cancelling the running requests now\n");
      m.server->end_grace();
    }
  }
  stopper.join();
  http.join();
  fmt::print(stderr, "serve: stopped\n");
  return kExitOk;
}

const Registrar kServeCommand(
    "serve", "Serve the model over an OpenAI-compatible HTTP API (continuous batching, streaming, /metrics)",
    60, [](CLI::App& app) -> CommandRunner {
      auto a = std::make_shared<ServeArgs>();
      serve::ServeSetup& s = a->setup;
      serve::SchedulerOptions& sc = s.server.scheduler;
      app.add_option("model", s.model, "checkpoint folder (config.json + safetensors)")->required();
      app.add_option("--tokenizer", s.tokenizer,
                     "folder with the tokenizer files (default: the model folder)");
      app.add_option("--host", s.server.host, "address to bind (default 127.0.0.1: this machine only)");
      app.add_option("--port", s.server.port, "port (default 8000; 0: any free port, printed)")
          ->check(CLI::Range(0, 65535));
      app.add_option("--api-key", s.server.api_key,
                     "require 'Authorization: Bearer KEY' on every /v1 request");
      app.add_option("--served-model-name", s.server.served_model_name,
                     "the name requests must give as 'model' (default: the folder's name)");
      app.add_option("--max-seqs", sc.max_seqs, "sequences in the running batch at once (default 256)")
          ->check(CLI::Range(int64_t{1}, int64_t{4096}));
      app.add_option("--max-waiting", sc.max_waiting,
                     "accepted requests waiting beyond --max-seqs; more get 429 (default 256)")
          ->check(CLI::Range(int64_t{0}, int64_t{65536}));
      app.add_option("--max-batch-tokens", sc.max_batch_tokens,
                     "tokens one step feeds: decode tokens plus prefill chunks (default 2048)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
      auto* blocks =
          app.add_option("--kv-blocks", s.kv_blocks, "KV pool capacity in blocks (one layer, 32 tokens)")
              ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
      auto* memory = app.add_option("--kv-memory", s.kv_memory,
                                    "KV pool capacity in bytes (default 1 GiB, at least one full context)")
                         ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 50));
      blocks->excludes(memory);
      app.add_option("--kv-dtype", s.engine.kv_dtype, "KV cache element type: bf16 (default), f32, fp8")
          ->check(CLI::IsMember({"bf16", "f32", "fp8"}));
      app.add_option("--dtype", s.engine.dtype, "activation precision: f32 (default) or bf16")
          ->check(CLI::IsMember({"f32", "bf16"}));
      add_page_cache_option(app, a->page_cache);
      app.add_option("--backend", s.backend, "backend: cpu (default), reference, partial");
      app.add_option("--threads", s.threads, "threads of the cpu backend (default: DAY0_THREADS or all)")
          ->check(CLI::Range(0, 4096));
      app.add_option("--context", sc.context, "tokens a sequence may hold (default: max_position_embeddings)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
      app.add_option("--policy", a->policy,
                     "KV admission: max-utilization (default; preempts the newest when blocks run out) or "
                     "guaranteed-no-evict (admits only what fits at its worst case)")
          ->check(CLI::IsMember({"max-utilization", "guaranteed-no-evict"}));
      app.add_flag("--no-prefix-caching", a->no_prefix_caching,
                   "do not reuse the KV blocks of earlier prompts");
      app.add_option("--shutdown-timeout", a->shutdown_timeout,
                     "seconds running requests get to finish after SIGINT/SIGTERM (default 10)")
          ->check(finite_number(0.0, 3600.0, "--shutdown-timeout"));
      app.add_option("--max-connections", s.server.max_connections,
                     "HTTP connections open at once; more get 503 (default 4096, at most the file limit)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
      app.add_option("--max-connections-per-client", s.server.max_connections_per_client,
                     "HTTP connections open at once from one client address (default 1024)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
      app.add_option("--request-timeout", a->request_timeout,
                     "seconds a request's head may take to arrive (its body: six times this; then 408; "
                     "default 10)")
          ->check(finite_number(0.1, 3600.0, "--request-timeout"));
      app.add_option("--keep-alive-timeout", a->keep_alive_timeout,
                     "seconds an idle keep-alive connection stays open (default 5)")
          ->check(finite_number(0.1, 3600.0, "--keep-alive-timeout"));
      app.add_option(
             "--max-tokens-default", s.server.max_tokens_default,
             "tokens a chat request without max_tokens may generate, at most the rest of the context; "
             "shown by /v1/models (default 4096; completions keep OpenAI's 16)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
      app.add_option("--tp", s.engine.layout.tp,
                     "tensor-parallel ranks (under mpirun -np TP x PP x EP; rank 0 serves HTTP; default 1)")
          ->check(CLI::Range(1, 4096));
      app.add_option("--pp", s.engine.layout.pp, "pipeline-parallel stages (default 1)")
          ->check(CLI::Range(1, 4096));
      app.add_option("--micro-batches", s.engine.micro_batches,
                     "under --pp: micro-batches a step's tokens are cut into (default: two per stage)")
          ->check(CLI::Range(0, 4096));
      app.add_option(
             "--dp-attention", s.engine.dp_attention,
             "attention data-parallel degree: equal to --ep (TP 1, PP 1), every EP rank serves its own "
             "requests on --port + its rank, MoE layers dispatched all-to-all (default 1)")
          ->check(CLI::Range(1, 4096));
      app.add_option("--ep", s.engine.layout.ep, "expert-parallel ranks (default 1)")
          ->check(CLI::Range(1, 4096));
      app.add_option("--moe-combine", s.engine.moe_combine, "under --ep: all-reduce (default) or all-to-all")
          ->check(CLI::IsMember({"all-reduce", "all-to-all"}));
      app.add_flag("--comm-overlap", s.engine.comm_overlap,
                   "under --ep with a shared expert: every rank computes the whole shared expert while the "
                   "routed experts' sum is in flight (default: each rank its block of the rows, then one "
                   "blocking sum)");
      app.add_option("--comm-timeout", s.comm.timeout_seconds,
                     "seconds a rank waits in one collective, or a follower for rank 0's next step, before "
                     "naming the dead or hung peer (default 30)")
          ->check(finite_number(0.0, 3600.0, "--comm-timeout (seconds)", true));
      app.add_option(
          "--redundant-experts", s.redundant_experts.count,
          "under --ep: extra physical copies of the most loaded experts in every MoE layer, spread "
          "evenly over the EP ranks (default 0)");
      app.add_option(
          "--expert-load", s.redundant_experts.load_file,
          "with --redundant-experts: per-layer expert load (JSON, as `day0 run --record-expert-load` "
          "writes) choosing which experts get copies (default: every expert weighs the same)");
      app.add_option("--weights", a->weights, "weight precision of the plan (checkpoint)");
      add_spec_flags(app, a->spec);
      a->spec_max_rows_option =
          app.add_option(
                 "--spec-max-rows", sc.spec_max_rows,
                 fmt::format("with --spec: the draft-row cap, rows (decoding rows and drafts) one step "
                             "may verify; drafts go to the sequences accepting most, and a step whose "
                             "decoding rows fill it runs without drafts; 0: no cap (default {})",
                             serve::kDefaultSpecMaxRows))
              ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
      return [a] { return serve_command(*a); };
    });

}  // namespace
}  // namespace day0::cli
