// cache_file.cpp: SHA-256 (FIPS 180-4) and the verified cache entry format;
// see cache_file.h.
#include "runtime/cache_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace torch_plugin::runtime {
namespace {

constexpr char kMagic[] = "TPCACHE1";
constexpr size_t kMagicLen = 8;
constexpr size_t kHeaderLen = kMagicLen + 64 + 1;

// FIPS 180-4, section 4.2.2: the first 32 bits of the fractional parts of the
// cube roots of the first 64 primes.
constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

// One 64-byte block into the state (FIPS 180-4, section 6.2.2).
void compress(std::array<uint32_t, 8>& h, const unsigned char* block) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = (uint32_t(block[4 * t]) << 24) | (uint32_t(block[4 * t + 1]) << 16) |
        (uint32_t(block[4 * t + 2]) << 8) | uint32_t(block[4 * t + 3]);
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6],
           hh = h[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = hh + s1 + ch + kRoundConstants[t] + w[t];
    uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = s0 + maj;
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += hh;
}

bool read_all(const std::string& path, std::string* data, std::string* why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *why = errno == ENOENT ? "missing" : std::strerror(errno);
    return false;
  }
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) {
    *why = "read error";
    return false;
  }
  *data = s.str();
  return true;
}

} // namespace

namespace {
// The hash an entry carries: over its file name and its payload, so an entry
// moved or swapped to another name (another kernel's key) does not verify.
std::string entry_hash(const std::string& name, const std::string& payload) {
  std::string all = name;
  all.push_back('\0');
  all += payload;
  return sha256_hex(all);
}
} // namespace

std::string sha256_hex(const std::string& data) {
  // FIPS 180-4, section 5.3.3: the initial hash value.
  std::array<uint32_t, 8> h = {
      0x6a09e667,
      0xbb67ae85,
      0x3c6ef372,
      0xa54ff53a,
      0x510e527f,
      0x9b05688c,
      0x1f83d9ab,
      0x5be0cd19};
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  size_t full = n / 64 * 64;
  for (size_t i = 0; i < full; i += 64)
    compress(h, p + i);
  // Padding (section 5.1.1): 0x80, zeros, the bit length as 64-bit big endian.
  unsigned char tail[128] = {};
  size_t rest = n - full;
  std::memcpy(tail, p + full, rest);
  tail[rest] = 0x80;
  size_t tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = static_cast<uint64_t>(n) * 8;
  for (int i = 0; i < 8; ++i)
    tail[tail_len - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  for (size_t i = 0; i < tail_len; i += 64)
    compress(h, tail + i);
  char out[65];
  for (int i = 0; i < 8; ++i)
    std::snprintf(out + 8 * i, 9, "%08x", h[i]);
  return std::string(out, 64);
}

bool read_cache_entry(
    const std::string& path,
    std::string* payload,
    std::string* why) {
  std::string data;
  if (!read_all(path, &data, why))
    return false;
  if (data.size() < kHeaderLen) {
    *why = "truncated header";
    return false;
  }
  if (data.compare(0, kMagicLen, kMagic) != 0 || data[kHeaderLen - 1] != '\n') {
    *why = "bad magic";
    return false;
  }
  std::string body = data.substr(kHeaderLen);
  const std::string name = path.substr(path.rfind('/') + 1);
  if (entry_hash(name, body) != data.substr(kMagicLen, 64)) {
    *why = "content hash mismatch";
    return false;
  }
  *payload = std::move(body);
  return true;
}

bool write_cache_entry(
    const std::string& dir,
    const std::string& name,
    const std::string& payload,
    std::string* why) {
  std::string tmpl = dir + "/.tmp-" + name + ".XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = mkstemp(buf.data()); // created 0600
  if (fd < 0) {
    *why =
        std::string("cannot create a temporary file: ") + std::strerror(errno);
    return false;
  }
  const std::string tmp(buf.data());
  const std::string data =
      std::string(kMagic) + entry_hash(name, payload) + "\n" + payload;
  size_t done = 0;
  bool ok = true;
  while (ok && done < data.size()) {
    ssize_t w = write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR)
      continue;
    ok = w > 0;
    if (ok)
      done += static_cast<size_t>(w);
  }
  ok = ok && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  ok = ok && std::rename(tmp.c_str(), (dir + "/" + name).c_str()) == 0;
  if (!ok) {
    *why = std::strerror(errno);
    unlink(tmp.c_str());
  }
  return ok;
}

} // namespace torch_plugin::runtime
