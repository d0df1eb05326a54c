// SHA-256 (FIPS 180-4), for the HTML report's Content-Security-Policy, which
// names the report's one script by the base64 of its SHA-256.
#ifndef PINSHIM_ANALYZER_REPORT_SHA256_H_
#define PINSHIM_ANALYZER_REPORT_SHA256_H_

#include <array>
#include <cstdint>
#include <string>

namespace pinshim {
namespace report {

std::array<uint8_t, 32> Sha256(const std::string& data);

// Standard base64 with padding (RFC 4648, section 4).
std::string Base64(const uint8_t* data, size_t size);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_SHA256_H_
