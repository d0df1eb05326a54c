#include "analyzer/report/format.h"

#include <unistd.h>

#include <cerrno>

#include "shim/core/safe_file.h"

#include <cmath>
#include <cstdio>

namespace pinshim {
namespace report {

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  char buf[32];
  if (bytes < 1024) {
    snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
    return buf;
  }
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  snprintf(buf, sizeof(buf), v < 10 ? "%.2f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string FormatSeconds(double s) {
  char buf[48];
  if (!(s > 0)) return "0 s";
  if (s < 1e-6)
    snprintf(buf, sizeof(buf), "%.0f ns", s * 1e9);
  else if (s < 1e-3)
    snprintf(buf, sizeof(buf), "%.1f us", s * 1e6);
  else if (s < 1)
    snprintf(buf, sizeof(buf), "%.2f ms", s * 1e3);
  else if (s < 120)
    snprintf(buf, sizeof(buf), "%.2f s", s);
  else
    snprintf(buf, sizeof(buf), "%.0f min %.0f s", std::floor(s / 60), std::fmod(s, 60));
  return buf;
}

std::string FormatCount(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  int k = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (k > 0 && k % 3 == 0) out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++k;
  }
  return out;
}

const char* DirectionWords(CopyDir dir) {
  switch (dir) {
    case CopyDir::kHostToDevice: return "host-to-device";
    case CopyDir::kDeviceToHost: return "device-to-host";
    case CopyDir::kHostToHost: return "host-to-host";
    case CopyDir::kDeviceToDevice: return "device-to-device";
    default: return "unknown-direction";
  }
}

std::string FormatGbps(double bps) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.1f GB/s", bps / 1e9);
  return buf;
}

const char* BudgetOwnerName(trace::BudgetOwner owner) {
  switch (owner) {
    case trace::BudgetOwner::kProgramAlloc: return "program_alloc";
    case trace::BudgetOwner::kProgramRegister: return "program_register";
    case trace::BudgetOwner::kPinshimPool: return "pinshim_pool";
    case trace::BudgetOwner::kPinshimCache: return "pinshim_cache";
    case trace::BudgetOwner::kProgramVmm: return "program_vmm";
    case trace::BudgetOwner::kProgramPool: return "program_pool";
  }
  return "unknown";
}

const char* BudgetDecisionName(trace::BudgetDecision decision) {
  switch (decision) {
    case trace::BudgetDecision::kGranted: return "granted";
    case trace::BudgetDecision::kDenied: return "denied";
    case trace::BudgetDecision::kFallback: return "fallback";
  }
  return "unknown";
}

const char* BudgetLimiterName(trace::BudgetLimiter limiter) {
  switch (limiter) {
    case trace::BudgetLimiter::kNone: return "none";
    case trace::BudgetLimiter::kProcess: return "process";
    case trace::BudgetLimiter::kNode: return "node";
    case trace::BudgetLimiter::kLedger: return "ledger";
  }
  return "unknown";
}

std::string Printable(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool c1 = c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(s[i + 1]) <= 0x9f;
    if (c >= 0x20 && c != 0x7f && !c1) {
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      char buf[16];
      if (c1) {
        snprintf(buf, sizeof(buf), "\\xc2\\x%02x", static_cast<unsigned char>(s[++i]));
      } else {
        snprintf(buf, sizeof(buf), "\\x%02x", c);
      }
      out += buf;
    }
  }
  return out;
}

bool ReadWholeFile(const std::string& path, uint64_t max_bytes, std::string* out,
                   std::string* error, bool* missing) {
  if (missing != nullptr) *missing = false;
  FileFacts facts;
  const int fd = OpenRegularForRead(path.c_str(), max_bytes, &facts);
  if (fd < 0) {
    if (missing != nullptr) *missing = fd == -ENOENT;
    *error = SafeFileReason(-fd);
    if (fd == -kFileTooLarge) *error += " (" + FormatBytes(max_bytes) + " at most)";
    return false;
  }
  out->assign(static_cast<size_t>(facts.size), '\0');
  const long n = ReadUpTo(fd, &(*out)[0], out->size());
  close(fd);
  if (n < 0) {
    *error = SafeFileReason(static_cast<int>(-n));
    return false;
  }
  out->resize(static_cast<size_t>(n));
  return true;
}

}  // namespace report
}  // namespace pinshim
