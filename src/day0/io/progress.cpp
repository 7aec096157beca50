#include "day0/io/progress.h"

#include <algorithm>

#include <fmt/format.h>

#include "day0/core/human.h"

namespace day0 {

std::string render_progress(const std::string& label, uint64_t done, uint64_t total, double seconds,
                            int bar_width) {
  const double fraction =
      total == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  std::string bar;
  if (bar_width > 0) {
    const int filled = static_cast<int>(fraction * bar_width);
    bar = fmt::format("[{:#<{}}{:<{}}] ", "", filled, "", bar_width - filled);
  }
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  std::string eta = "ETA --";
  if (done >= total) {
    eta = "done";
  } else if (rate > 0) {
    eta = "ETA " + human_seconds(static_cast<double>(total - done) / rate);
  }
  return fmt::format("{} {}{} / {}  {}/s  {}", label, bar, human_bytes(static_cast<double>(done)),
                     human_bytes(static_cast<double>(total)), human_bytes(rate), eta);
}

ByteProgress::ByteProgress(std::string label, uint64_t total_bytes, std::FILE* out, bool tty)
    : label_(std::move(label)), total_(total_bytes), out_(out), tty_(tty) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

uint64_t ByteProgress::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void ByteProgress::add(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += bytes;
  draw_locked(false);
}

void ByteProgress::draw_locked(bool force) {
  if (out_ == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  const auto since = now - last_draw_;
  const auto interval = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(30000);
  if (!force && since < interval) return;
  last_draw_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (tty_) {
    fmt::print(out_, "\r\033[2K{}", render_progress(label_, done_, total_, seconds, 30));
    bar_visible_ = true;
  } else {
    fmt::print(out_, "{}\n", render_progress(label_, done_, total_, seconds, 0));
  }
  std::fflush(out_);
}

void ByteProgress::note(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (out_ == nullptr) return;
  if (bar_visible_) fmt::print(out_, "\r\033[2K");
  fmt::print(out_, "{}\n", line);
  bar_visible_ = false;
  if (tty_) draw_locked(true);
  std::fflush(out_);
}

void ByteProgress::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (out_ == nullptr) return;
  if (bar_visible_) fmt::print(out_, "\r\033[2K");
  bar_visible_ = false;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  fmt::print(out_, "{} {} in {} ({}/s)\n", label_, human_bytes(static_cast<double>(done_)),
             human_seconds(seconds), human_bytes(seconds > 0 ? static_cast<double>(done_) / seconds : 0.0));
  std::fflush(out_);
}

}  // namespace day0
