#include "day0/io/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace day0 {

namespace {

struct EvpContext {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~EvpContext() { EVP_MD_CTX_free(ctx); }
};

std::string to_hex(const unsigned char* digest, unsigned len) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::span<const uint8_t> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  return to_hex(digest, len);
}

Result<std::string> sha256_file(const std::string& path, const BytesProgress& on_bytes,
                                const ChunkObserver& on_chunk) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found(path + ": no such file");
    return io_error(path + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file (a device, FIFO or directory): not hashed");
  }
  uint64_t offset = 0;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  EvpContext evp;
  if (evp.ctx == nullptr || EVP_DigestInit_ex(evp.ctx, EVP_sha256(), nullptr) != 1) {
    ::close(fd);
    return internal_error("OpenSSL: cannot initialise SHA-256");
  }
  constexpr size_t kChunk = 8u << 20;
  std::unique_ptr<unsigned char[]> buffer(new unsigned char[kChunk]);
  while (true) {
    const ssize_t n = ::read(fd, buffer.get(), kChunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return io_error(path + ": read failed: " + std::strerror(err));
    }
    if (n == 0) break;
    EVP_DigestUpdate(evp.ctx, buffer.get(), static_cast<size_t>(n));
    if (on_chunk) on_chunk(offset, std::span<const uint8_t>(buffer.get(), static_cast<size_t>(n)));
    offset += static_cast<uint64_t>(n);
    if (on_bytes) on_bytes(static_cast<uint64_t>(n));
  }
  ::close(fd);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(evp.ctx, digest, &len);
  return to_hex(digest, len);
}

std::vector<Result<std::string>> sha256_files(
    const std::vector<std::string>& paths, int threads, const BytesProgress& on_bytes,
    const std::function<void(size_t index, const Result<std::string>&)>& on_done,
    const std::function<void(size_t index, uint64_t offset, std::span<const uint8_t> bytes)>& on_chunk) {
  std::vector<Result<std::string>> results(paths.size(), Result<std::string>(internal_error("not hashed")));
  std::atomic<size_t> next{0};
  std::mutex done_mutex;
  auto worker = [&] {
    for (size_t i = next++; i < paths.size(); i = next++) {
      ChunkObserver observer;
      if (on_chunk)
        observer = [&on_chunk, i](uint64_t off, std::span<const uint8_t> b) { on_chunk(i, off, b); };
      auto digest = sha256_file(paths[i], on_bytes, observer);
      std::lock_guard<std::mutex> lock(done_mutex);
      results[i] = std::move(digest);
      if (on_done) on_done(i, results[i]);
    }
  };
  const size_t n_threads =
      std::clamp<size_t>(static_cast<size_t>(std::max(threads, 1)), 1, std::max<size_t>(paths.size(), 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return results;
}

}  // namespace day0
