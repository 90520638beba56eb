// cache_file.h: verified files of the on-disk kernel caches (CPU .so, CUDA
// cubin/PTX).
//
// A cache entry is one file: a 73-byte header, "TPCACHE1", the SHA-256 of the
// entry's file name, a NUL and the payload, as 64 lowercase hex digits, and
// '\n'; then the payload (the shared library or GPU image). The name is in the
// hash because it is the content address (the key): an entry copied or swapped
// to another key's name does not verify. Readers check the header and the hash
// before the payload is used (dlopen, cuModuleLoadData): a truncated,
// bit-flipped or swapped file is reported as damaged, never loaded. Writers go
// through a temporary file with an unpredictable name (mkstemp) in the same
// folder, created 0600, fsync'ed, then renamed into place.
//
// SHA-256 itself: sha256_hex, an implementation of FIPS 180-4 ("Secure Hash
// Standard", section 6.2), checked against Python's hashlib in
// tests/python/compiler/test_kernel_cache_integrity.py.
#pragma once

#include <string>

namespace torch_plugin::runtime {

// The SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(const std::string& data);

// Reads the cache entry `path` and returns true with its payload in *payload
// when the header and hash hold. Returns false with the reason in *why
// ("missing", "truncated header", "bad magic", "content hash mismatch", or the
// read error) otherwise; "missing" means the file does not exist.
bool read_cache_entry(
    const std::string& path,
    std::string* payload,
    std::string* why);

// Writes `payload` as the cache entry dir/name (see above). Returns false with
// the reason in *why when any step fails (the temporary file is removed).
bool write_cache_entry(
    const std::string& dir,
    const std::string& name,
    const std::string& payload,
    std::string* why);

} // namespace torch_plugin::runtime
