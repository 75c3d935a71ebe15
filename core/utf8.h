// Text that leaves the daemon (the store, gRPC string fields) must be valid UTF-8: protobuf refuses anything
// else, and one bad byte from a worker would make every listing that carries it fail.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace soartune {

// `s` with every byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD.
std::string valid_utf8(std::string_view s);
// The longest prefix of `s` of at most `max_bytes` bytes that does not end inside a multi-byte character.
std::string_view utf8_prefix(std::string_view s, size_t max_bytes);
// The shortest suffix of `s` of at most `max_bytes` bytes that does not start inside a multi-byte character.
std::string_view utf8_suffix(std::string_view s, size_t max_bytes);

}  // namespace soartune
