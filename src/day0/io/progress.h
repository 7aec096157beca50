#pragma once
// Byte progress for long streaming jobs (hashing terabytes). On a terminal: one redrawn line with a
// bar, bytes, rate and ETA. Otherwise (logs, CI): quiet lines only, those passed to note() plus a
// progress line at most every 30 s. Thread-safe.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace day0 {

// "hashing [#########           ] 1.23 GB / 4.56 GB  850.00 MB/s  ETA 3.92 s"
std::string render_progress(const std::string& label, uint64_t done, uint64_t total, double seconds,
                            int bar_width);

class ByteProgress {
 public:
  // `out` nullptr: silent. `tty` decides the style (usually isatty(fileno(out))).
  ByteProgress(std::string label, uint64_t total_bytes, std::FILE* out, bool tty);
  void add(uint64_t bytes);
  void note(const std::string& line);
  // Clears the bar (TTY) and prints a closing summary line.
  void finish();
  uint64_t done() const;

 private:
  void draw_locked(bool force);
  std::string label_;
  uint64_t total_;
  std::FILE* out_;
  bool tty_;
  mutable std::mutex mutex_;
  uint64_t done_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool bar_visible_ = false;
};

}  // namespace day0
