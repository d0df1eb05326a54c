#include "analyzer/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "analyzer/report/format.h"
#include "analyzer/report/json_report.h"
#include "analyzer/report/sha256.h"
#include "analyzer/report/symbolizer.h"
#include "analyzer/report/text_report.h"

namespace pinshim {
namespace report {
namespace {

// --- Text -------------------------------------------------------------------

std::string Esc(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Num(double v, int decimals = 1) {
  char b[48];
  snprintf(b, sizeof(b), "%.*f", decimals, v);
  return b;
}

const char* FrameworkTitle(const std::string& name) {
  if (name == "pytorch") return "PyTorch";
  if (name == "cupy") return "CuPy";
  if (name == "jax") return "JAX";
  if (name == "numpy") return "NumPy";
  if (name == "python") return "Python";
  return "";
}

// --- Charts -----------------------------------------------------------------

enum class Unit { kBytes, kBytesPerSecond };

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (seconds, value), in time order
  bool markers = false;                           // events, drawn as dots, not a level over time
};

struct Limit {
  std::string name;
  double value;
  std::string color;
};

std::string Label(Unit unit, double v) {
  if (unit == Unit::kBytes) return FormatBytes(static_cast<uint64_t>(v < 0 ? 0 : v));
  return FormatGbps(v);
}

// A step of 1, 2 or 5 times a power of ten giving about `ticks` ticks.
double NiceStep(double range, int ticks) {
  if (range <= 0) return 1;
  double raw = range / ticks;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

// Byte axes step in powers of two of KiB/MiB/GiB for round labels.
double NiceByteStep(double range, int ticks) {
  double raw = range / ticks;
  double step = 1;
  while (step < raw) step *= 2;
  return step;
}

// At most `max_points` per series: each pixel column keeps its largest
// value, so peaks survive.
std::vector<std::pair<double, double>> Thin(const std::vector<std::pair<double, double>>& in,
                                            double x_max, size_t max_points) {
  if (in.size() <= max_points || x_max <= 0) return in;
  std::vector<std::pair<double, double>> out;
  double width = x_max / static_cast<double>(max_points);
  size_t i = 0;
  while (i < in.size()) {
    double column = std::floor(in[i].first / width);
    std::pair<double, double> best = in[i];
    size_t j = i + 1;
    while (j < in.size() && std::floor(in[j].first / width) == column) {
      if (in[j].second > best.second) best.second = in[j].second;
      ++j;
    }
    out.push_back(best);
    i = j;
  }
  return out;
}

// A chart's size and margins, in SVG units.
constexpr double kChartW = 720, kChartH = 210, kChartLeft = 78, kChartRight = 12, kChartTop = 10,
                 kChartBottom = 28;

// Where times and values land in a chart's plot area (clamped to it).
struct ChartScale {
  double x_max;
  double top;
  double plot_w = kChartW - kChartLeft - kChartRight;
  double plot_h = kChartH - kChartTop - kChartBottom;
  double X(double t) const { return kChartLeft + plot_w * std::min(1.0, std::max(0.0, t / x_max)); }
  double Y(double v) const {
    return kChartTop + plot_h * (1 - std::min(1.0, std::max(0.0, v / top)));
  }
};

// One series drawn: markers, or a line of steps.
std::string SeriesSvg(const Series& s, const ChartScale& sc, Unit unit) {
  std::vector<std::pair<double, double>> pts = Thin(s.points, sc.x_max, 700);
  std::string out;
  if (s.markers) {
    out += "<g fill=\"" + s.color + "\"><title>" + Esc(s.name) + "</title>";
    for (const auto& p : pts) {
      out += "<circle class=\"marker\" r=\"3\" cx=\"" + Num(sc.X(p.first)) + "\" cy=\"" +
             Num(sc.Y(p.second)) + "\"/>";
    }
    return out + "</g>";
  }
  std::string path;
  double peak = 0;
  // Steps: a value holds until the next one (samples, buckets and the
  // totals after each call alike); a straight line would invent values.
  for (size_t i = 0; i < pts.size(); ++i) {
    if (i == 0) {
      path = "M" + Num(sc.X(pts[i].first)) + " " + Num(sc.Y(pts[i].second));
    } else {
      path += " H" + Num(sc.X(pts[i].first)) + " V" + Num(sc.Y(pts[i].second));
    }
    peak = std::max(peak, pts[i].second);
  }
  if (pts.size() == 1) {
    path += " L" + Num(sc.X(pts[0].first) + 1) + " " + Num(sc.Y(pts[0].second));
  }
  return "<path class=\"line\" stroke=\"" + s.color + "\" d=\"" + path + "\"><title>" +
         Esc(s.name + " (peak " + Label(unit, peak) + ")") + "</title></path>";
}

// The grid, the ticks of both axes and the limits' lines.
std::string ChartAxes(const ChartScale& sc, double step, const std::vector<Limit>& limits,
                      Unit unit) {
  std::string out;
  for (double v = 0; v <= sc.top + step / 2; v += step) {
    out += "<line class=\"grid\" x1=\"" + Num(kChartLeft, 0) + "\" x2=\"" +
           Num(kChartW - kChartRight, 0) + "\" y1=\"" + Num(sc.Y(v)) + "\" y2=\"" + Num(sc.Y(v)) +
           "\"/>";
    out += "<text class=\"tick\" x=\"" + Num(kChartLeft - 6, 0) + "\" y=\"" + Num(sc.Y(v) + 4) +
           "\" text-anchor=\"end\">" + Esc(Label(unit, v)) + "</text>";
  }
  double xs = NiceStep(sc.x_max, 6);
  for (double t = 0; t <= sc.x_max * 1.0001; t += xs) {
    out += "<text class=\"tick\" x=\"" + Num(sc.X(t)) + "\" y=\"" + Num(kChartH - 10, 0) +
           "\" text-anchor=\"middle\">" + Esc(FormatSeconds(t)) + "</text>";
  }
  for (const Limit& l : limits) {
    out += "<line class=\"limit\" stroke=\"" + l.color + "\" x1=\"" + Num(kChartLeft, 0) +
           "\" x2=\"" + Num(kChartW - kChartRight, 0) + "\" y1=\"" + Num(sc.Y(l.value)) +
           "\" y2=\"" + Num(sc.Y(l.value)) + "\"><title>" +
           Esc(l.name + ": " + Label(unit, l.value)) + "</title></line>";
  }
  return out;
}

// The legend under a chart: its series, then its limits.
std::string ChartLegend(const std::vector<Series>& series, const std::vector<Limit>& limits,
                        Unit unit) {
  std::string out = "<div class=\"legend\">";
  for (const Series& s : series) {
    out += "<span><i class=\"" + std::string(s.markers ? "dot" : "") +
           "\" style=\"background:" + s.color + "\"></i>" + Esc(s.name) + "</span>";
  }
  for (const Limit& l : limits) {
    out += "<span><i class=\"dash\" style=\"border-color:" + l.color + "\"></i>" +
           Esc(l.name + " " + Label(unit, l.value)) + "</span>";
  }
  return out + "</div>";
}

std::string Chart(const std::string& title, const std::string& note, const std::vector<Series>& all,
                  const std::vector<Limit>& limits, double x_max, Unit unit) {
  std::vector<Series> series;
  for (const Series& s : all) {
    if (!s.points.empty()) series.push_back(s);
  }
  double y_max = 0;
  for (const Series& s : series) {
    for (const auto& p : s.points) y_max = std::max(y_max, p.second);
  }
  for (const Limit& l : limits) y_max = std::max(y_max, l.value);
  if (x_max <= 0) x_max = 1e-3;
  std::string out = "<figure class=\"chart\"><figcaption>" + Esc(title) +
                    (note.empty() ? "" : " <span class=\"note\">" + Esc(note) + "</span>") +
                    "</figcaption>";
  if (series.empty() && limits.empty()) {
    return out + "<p class=\"empty\">Nothing recorded.</p></figure>";
  }
  if (y_max <= 0) y_max = 1;
  double step = unit == Unit::kBytes ? NiceByteStep(y_max, 4) : NiceStep(y_max, 4);
  ChartScale sc{x_max, std::ceil(y_max * 1.04 / step) * step};
  out += "<svg class=\"chart\" viewBox=\"0 0 " + Num(kChartW, 0) + " " + Num(kChartH, 0) +
         "\" role=\"img\" aria-label=\"" + Esc(title) + "\">";
  out += "<rect x=\"" + Num(kChartLeft, 0) + "\" y=\"" + Num(kChartTop, 0) + "\" width=\"" +
         Num(sc.plot_w, 0) + "\" height=\"" + Num(sc.plot_h, 0) + "\" class=\"plot\"/>";
  out += ChartAxes(sc, step, limits, unit);
  for (const Series& s : series) out += SeriesSvg(s, sc, unit);
  out += "</svg>" + ChartLegend(series, limits, unit) + "</figure>";
  return out;
}

// --- One process's events -------------------------------------------------------

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

struct SiteStats {
  uint64_t copies = 0;
  uint64_t failed = 0;
  uint64_t bytes = 0;
  uint64_t sync_bytes = 0;
  uint64_t sync_ns = 0;
  uint64_t call_ns = 0;
  uint64_t by_dir[4] = {};
  uint64_t by_kind[static_cast<int>(MemKind::kCount)] = {};
  uint64_t pin_allocs = 0;
  uint64_t pin_bytes = 0;
  uint64_t host_allocs = 0;
  uint64_t host_bytes = 0;
};

class Collector : public EventVisitor {
 public:
  Collector(uint64_t origin_ns, uint64_t end_ns) : origin_(origin_ns) {
    double span = end_ns > origin_ns ? (end_ns - origin_ns) * 1e-9 : 1e-3;
    bucket_s_ = std::max(span / 120, 1e-3);
    buckets_ = static_cast<size_t>(std::ceil(span / bucket_s_)) + 1;
  }

  void OnEvent(const Event& e) override {
    double t = Seconds(e.time_ns);
    end_s_ = std::max(end_s_, t);
    switch (e.type) {
      case trace::EventType::kSample: {
        // The program's pinning comes from its own calls (exact, even in a
        // run too short for a sample); the sample adds the total with
        // pinshim's own and the resident set.
        total_.points.emplace_back(
            t, static_cast<double>(e.pinned_program + e.registered_program + e.pinned_pinshim));
        if (e.rss_bytes != 0) rss_.points.emplace_back(t, static_cast<double>(e.rss_bytes));
        if (e.budget_bytes != 0) budget_ = e.budget_bytes;
        break;
      }
      case trace::EventType::kCopy: Copy(e, t); break;
      case trace::EventType::kPin: {
        if (e.result != 0) break;
        bool registered = e.op == PinOp::kRegister || e.op == PinOp::kUnregister;
        bool grows = e.op == PinOp::kAlloc || e.op == PinOp::kRegister;
        int64_t& now = registered ? registered_now_ : pinned_now_;
        Series& series = registered ? registered_ : pinned_;
        series.points.emplace_back(t, static_cast<double>(now));
        now += grows ? static_cast<int64_t>(e.bytes) : -static_cast<int64_t>(e.bytes);
        if (now < 0) now = 0;
        series.points.emplace_back(t, static_cast<double>(now));
        if (!grows) break;
        SiteStats& s = sites_[e.stack];
        ++s.pin_allocs;
        s.pin_bytes += e.bytes;
        break;
      }
      case trace::EventType::kHostAlloc: {
        if (e.is_free) break;
        SiteStats& s = sites_[e.stack];
        ++s.host_allocs;
        s.host_bytes += e.bytes;
        break;
      }
      case trace::EventType::kOwnPin: {
        if (e.own_action == OwnPinAction::kPinned) own_now_ += static_cast<int64_t>(e.bytes);
        if (e.own_action == OwnPinAction::kUnpinned) own_now_ -= static_cast<int64_t>(e.bytes);
        if (own_now_ < 0) own_now_ = 0;
        if (e.own_action != OwnPinAction::kRefused) {
          own_.points.emplace_back(t, static_cast<double>(own_now_));
          pinshim_.points.emplace_back(t, static_cast<double>(own_now_));
        } else {
          refused_.points.emplace_back(t, static_cast<double>(e.bytes));
        }
        break;
      }
      case trace::EventType::kOptimizeCounters:
        if (e.counters.pin_cap_bytes != 0 && e.counters.pin_cap_bytes != UINT64_MAX) {
          cap_ = e.counters.pin_cap_bytes;
        }
        break;
      case trace::EventType::kBudgetDecision:
        if (e.process_budget != 0) budget_ = e.process_budget;
        break;
      default: break;
    }
  }

  std::string Charts(const ProcessReport& p) const {
    double x_max = std::max(end_s_, 1e-3);
    std::string out = "<div class=\"charts\">";
    std::vector<Limit> limits;
    uint64_t budget = budget_ != 0 ? budget_ : p.info.budget_bytes;
    if (budget != 0) limits.push_back({"budget", static_cast<double>(budget), "#d62728"});
    if (cap_ != 0 && p.own.optimize_mode) {
      limits.push_back({"pinshim's pin cap", static_cast<double>(cap_), "#9467bd"});
    }
    Series total = total_, pinned = pinned_, registered = registered_, pinshim = pinshim_;
    // Each step series runs on to the end of the run.
    for (Series* s : {&pinned, &registered, &pinshim}) {
      if (!s->points.empty()) s->points.emplace_back(x_max, s->points.back().second);
    }
    total.name = "pinned in all (sampled)";
    total.color = "#333333";
    pinned.name = "pinned by the program";
    pinned.color = kPalette[0];
    registered.name = "registered by the program";
    registered.color = kPalette[2];
    pinshim.name = "pinned by pinshim";
    pinshim.color = kPalette[4];
    std::vector<Series> pin_series = {total, pinned, registered};
    if (p.own.optimize_mode) pin_series.push_back(pinshim);
    out += Chart("Pinned memory", "", pin_series, limits, x_max, Unit::kBytes);
    Series rss = rss_;
    rss.name = "resident set";
    rss.color = kPalette[1];
    out += Chart("Resident set size (RSS)",
                 "sampled every " + std::to_string(p.info.sample_ms) + " ms", {rss}, {}, x_max,
                 Unit::kBytes);
    std::vector<Series> bw;
    size_t color = 0;
    for (const auto& kv : copies_) {
      Series s;
      s.name = std::string(CopyDirName(static_cast<CopyDir>(kv.first.first))) + " " +
               MemKindName(static_cast<MemKind>(kv.first.second));
      s.color = kPalette[color++ % (sizeof(kPalette) / sizeof(kPalette[0]))];
      for (size_t b = 0; b < kv.second.size(); ++b) {
        s.points.emplace_back((static_cast<double>(b) + 0.5) * bucket_s_,
                              static_cast<double>(kv.second[b]) / bucket_s_);
      }
      bw.push_back(std::move(s));
    }
    out += Chart("Copy throughput by direction and host memory",
                 "bytes moved per second, in " + FormatSeconds(bucket_s_) + " buckets", bw, {},
                 x_max, Unit::kBytesPerSecond);
    if (p.own.optimize_mode) {
      Series own = own_;
      own.name = "pinned by optimize mode (pool, cache, arena)";
      own.color = kPalette[4];
      Series refused = refused_;
      refused.name = "refused pinnings (bytes asked)";
      refused.color = kPalette[3];
      refused.markers = true;
      std::vector<Limit> own_limits;
      if (cap_ != 0) own_limits.push_back({"pin cap", static_cast<double>(cap_), "#9467bd"});
      out +=
          Chart("Optimize mode's own pinning", "", {own, refused}, own_limits, x_max, Unit::kBytes);
    }
    return out + "</div>";
  }

  const std::unordered_map<uint32_t, SiteStats>& sites() const { return sites_; }

 private:
  double Seconds(uint64_t t) const { return t > origin_ ? (t - origin_) * 1e-9 : 0; }

  void Copy(const Event& e, double t) {
    SiteStats& s = sites_[e.stack];
    ++s.copies;
    s.call_ns += e.duration_ns;
    if (e.result != 0) {
      ++s.failed;
      return;
    }
    s.bytes += e.bytes;
    s.by_dir[static_cast<int>(e.dir) & 3] += e.bytes;
    MemKind kind = e.dir == CopyDir::kDeviceToDevice ? MemKind::kDevice : e.HostKind();
    int k = static_cast<int>(kind);
    if (k >= 0 && k < static_cast<int>(MemKind::kCount)) s.by_kind[k] += e.bytes;
    if (!e.async) {
      s.sync_bytes += e.bytes;
      s.sync_ns += e.duration_ns;
    }
    if (e.dir == CopyDir::kDeviceToDevice) return;
    std::vector<uint64_t>& b = copies_[{static_cast<int>(e.dir), k}];
    if (b.empty()) b.resize(buckets_);
    size_t i = std::min(buckets_ - 1, static_cast<size_t>(t / bucket_s_));
    b[i] += e.bytes;
  }

  uint64_t origin_;
  double bucket_s_ = 1e-3;
  size_t buckets_ = 1;
  double end_s_ = 0;
  Series pinned_, registered_, pinshim_, total_, rss_, own_, refused_;
  int64_t own_now_ = 0;
  int64_t pinned_now_ = 0;
  int64_t registered_now_ = 0;
  uint64_t budget_ = 0;
  uint64_t cap_ = 0;
  std::map<std::pair<int, int>, std::vector<uint64_t>> copies_;
  std::unordered_map<uint32_t, SiteStats> sites_;
};

// --- Page parts -------------------------------------------------------------------

std::string FrameLine(const Frame& f, bool site) {
  std::string cls = f.python ? "py" : "native";
  if (f.runtime) cls += " runtime";
  if (f.library) cls += " library";
  if (site) cls += " site";
  std::string title = f.function.empty() ? f.module : f.function;
  if (!f.python && !f.module.empty()) title += " [" + f.module + "]";
  return "<li class=\"" + cls + "\" title=\"" + Esc(title) + "\">" + Esc(f.Describe(true)) +
         (f.inlined ? " <span class=\"note\">[inlined]</span>" : "") +
         (site ? " <span class=\"tag\">site</span>" : "") + "</li>";
}

std::string StackHtml(const Site& site) {
  if (!site.known || site.stack.empty()) return "";
  std::string out = "<details class=\"stack\"><summary>stack, " +
                    std::to_string(site.stack.size()) + " frames, innermost first</summary><ol>";
  for (size_t i = 0; i < site.stack.size(); ++i) {
    out += FrameLine(site.stack[i], static_cast<int>(i) == site.site_index);
  }
  return out + "</ol></details>";
}

std::string ValueText(const Value& v);

std::string ScalarText(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kNull: return "-";
    case Value::Kind::kBool: return v.bool_value() ? "yes" : "no";
    case Value::Kind::kInt:
      return FormatCount(static_cast<uint64_t>(v.int_value() < 0 ? 0 : v.int_value()));
    case Value::Kind::kDouble: return Num(v.double_value(), 3);
    case Value::Kind::kString: return v.string_value();
    case Value::Kind::kBytes: return FormatBytes(static_cast<uint64_t>(v.int_value()));
    case Value::Kind::kSeconds: return FormatSeconds(v.double_value());
    case Value::Kind::kSite: return v.has_site() ? v.site().Short() : "an unknown site";
    default: return ValueText(v);
  }
}

std::string ValueText(const Value& v) {
  if (v.kind() == Value::Kind::kArray) {
    std::string out;
    for (const Value& i : v.items()) out += (out.empty() ? "" : "; ") + ValueText(i);
    return out.empty() ? "none" : out;
  }
  if (v.kind() == Value::Kind::kObject) {
    std::string out;
    for (const auto& m : v.members()) {
      std::string key = m.first;
      std::replace(key.begin(), key.end(), '_', ' ');
      out += (out.empty() ? "" : ", ") + key + " " + ValueText(m.second);
    }
    return out;
  }
  return ScalarText(v);
}

// Numbers as a wrapped list of "key value" pairs; lists and sites, which
// run long, one a line below them.
std::string EvidenceHtml(const Value& ev) {
  if (ev.members().empty()) return "";
  std::string pairs, long_ones;
  for (const auto& m : ev.members()) {
    std::string key = m.first;
    std::replace(key.begin(), key.end(), '_', ' ');
    Value::Kind k = m.second.kind();
    bool is_long = k == Value::Kind::kArray || k == Value::Kind::kObject || k == Value::Kind::kSite;
    std::string item = "<span class=\"k\">" + Esc(key) + "</span> " + Esc(ValueText(m.second));
    if (is_long) {
      long_ones += "<li>" + item + "</li>";
    } else {
      pairs += "<span class=\"pair\">" + item + "</span>";
    }
  }
  return "<div class=\"evidence\">" + pairs + "</div>" +
         (long_ones.empty() ? "" : "<ul class=\"evidence\">" + long_ones + "</ul>");
}

std::string FindingHtml(const Finding& f, size_t index, const MergedReport& r) {
  const char* sev = SeverityName(f.severity);
  std::string out = "<article class=\"finding " + std::string(sev) + "\" id=\"finding-" +
                    std::to_string(index + 1) + "\" data-rule=\"" + Esc(f.rule) + "\">";
  out += "<h3><span class=\"badge " + std::string(sev) + "\">" + sev + "</span> <code>" +
         Esc(f.rule) + "</code>";
  if (f.seconds_lost > 0) {
    out += " <span class=\"lost\">est. " + Esc(FormatSeconds(f.seconds_lost)) + " lost</span>";
  }
  if (r.processes.size() > 1) {
    std::string procs;
    std::vector<int> seen;
    for (int p : f.processes) {
      if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
      seen.push_back(p);
      procs += (procs.empty() ? "p" : ", p") + std::to_string(p);
    }
    out += " <span class=\"note\">in " + Esc(procs) + "</span>";
  }
  out += "</h3>";
  out += "<p class=\"site\">at <code>" + Esc(f.site.Short()) + "</code></p>";
  out += "<p>" + Esc(f.explanation) + "</p>";
  std::string fw = FrameworkTitle(f.framework);
  out += "<p class=\"fix\"><b>Fix" +
         (f.generic_fix.empty() || fw.empty() ? std::string() : " (" + fw + ")") + ":</b> " +
         Esc(f.fix) + "</p>";
  if (!f.generic_fix.empty()) {
    out += "<details><summary>generic fix</summary><p>" + Esc(f.generic_fix) + "</p></details>";
  }
  out += EvidenceHtml(f.evidence);
  out += StackHtml(f.site);
  return out + "</article>";
}

// One row of a process's site table: sites merged by what the report
// names them.
struct SiteRow {
  std::string name;
  std::string title;
  SiteStats s;
  std::vector<std::string> rules;
};

void Add(SiteStats* into, const SiteStats& s) {
  into->copies += s.copies;
  into->failed += s.failed;
  into->bytes += s.bytes;
  into->sync_bytes += s.sync_bytes;
  into->sync_ns += s.sync_ns;
  into->call_ns += s.call_ns;
  for (int d = 0; d < 4; ++d) into->by_dir[d] += s.by_dir[d];
  for (int k = 0; k < static_cast<int>(MemKind::kCount); ++k) into->by_kind[k] += s.by_kind[k];
  into->pin_allocs += s.pin_allocs;
  into->pin_bytes += s.pin_bytes;
  into->host_allocs += s.host_allocs;
  into->host_bytes += s.host_bytes;
}

std::string Cell(uint64_t sort_value, const std::string& text) {
  return "<td data-v=\"" + std::to_string(sort_value) + "\">" + Esc(text) + "</td>";
}

// The name of a stack's site for the table (the file's name only), and its
// whole description for the tooltip (empty when the stack has no site).
void NameSite(Symbolizer* sym, uint32_t stack, std::string* name, std::string* title) {
  *name = "unknown site";
  if (stack != 0) {
    const SymbolizedStack& st = sym->Symbolize(stack);
    if (const Frame* f = st.SiteFrame()) {
      // The table is narrow: the file's name only; the whole site in the
      // tooltip (and the key keeps sites in different files apart).
      Frame brief = *f;
      size_t slash = brief.file.rfind('/');
      if (slash != std::string::npos) brief.file = brief.file.substr(slash + 1);
      *name = brief.Describe(true);
      *title = f->Describe(false);
      const char* why = PythonStatusWords(st.python);
      if (why[0] != '\0') *name += std::string(" [") + why + "]";
    } else if (!st.frames.empty()) {
      *name = st.frames[0].Describe(true);
    }
  }
}

// Each finding's rule, on the row of the site it names.
void NoteFindingRules(const ProcessReport& p, std::map<std::string, SiteRow>* rows) {
  for (const Finding& f : p.findings) {
    if (!f.site.known || f.site.site_index < 0) continue;
    auto it = rows->find(f.site.stack[static_cast<size_t>(f.site.site_index)].Describe(false));
    if (it != rows->end() && std::find(it->second.rules.begin(), it->second.rules.end(), f.rule) ==
                                 it->second.rules.end()) {
      it->second.rules.push_back(f.rule);
    }
  }
}

// One row of the call-site table.
std::string SiteRowHtml(const SiteRow& r) {
  std::string out;
  const SiteStats& s = r.s;
  std::string kinds;
  for (int k = 0; k < static_cast<int>(MemKind::kCount); ++k) {
    if (s.by_kind[k] == 0 || k == static_cast<int>(MemKind::kDevice)) continue;
    kinds += (kinds.empty() ? "" : ", ") + std::string(MemKindName(static_cast<MemKind>(k))) + " " +
             FormatBytes(s.by_kind[k]);
  }
  double gbps = s.sync_ns > 0 ? s.sync_bytes / (s.sync_ns * 1e-9) : 0;
  std::string rules;
  for (const std::string& rule : r.rules) rules += (rules.empty() ? "" : ", ") + rule;
  out +=
      "<tr><td class=\"name\" title=\"" + Esc(r.title) + "\"><code>" + Esc(r.name) + "</code></td>";
  out += Cell(s.copies,
              FormatCount(s.copies) + (s.failed ? " (" + FormatCount(s.failed) + " failed)" : ""));
  out += Cell(s.bytes, FormatBytes(s.bytes));
  out += Cell(s.by_dir[0], s.by_dir[0] ? FormatBytes(s.by_dir[0]) : "-");
  out += Cell(s.by_dir[1], s.by_dir[1] ? FormatBytes(s.by_dir[1]) : "-");
  out += "<td>" + Esc(kinds.empty() ? "-" : kinds) + "</td>";
  out += Cell(s.call_ns, FormatSeconds(s.call_ns * 1e-9));
  out += Cell(static_cast<uint64_t>(gbps), gbps > 0 ? FormatGbps(gbps) : "-");
  out +=
      Cell(s.pin_bytes,
           s.pin_allocs ? FormatCount(s.pin_allocs) + " (" + FormatBytes(s.pin_bytes) + ")" : "-");
  out += "<td>" + Esc(rules.empty() ? "-" : rules) + "</td></tr>";
  return out;
}

std::string SiteTable(const Collector& c, const TraceReader& reader, const ProcessReport& p) {
  Symbolizer sym(&reader);
  std::map<std::string, SiteRow> rows;
  // Symbolizing every stack of a long trace would take long: the stacks
  // that moved or pinned the most are named, the rest summed in one row.
  constexpr size_t kMaxStacks = 400;
  std::vector<std::pair<uint32_t, const SiteStats*>> stacks;
  for (const auto& kv : c.sites()) {
    if (kv.second.copies != 0 || kv.second.pin_allocs != 0)
      stacks.emplace_back(kv.first, &kv.second);
  }
  std::sort(stacks.begin(), stacks.end(), [](const auto& a, const auto& b) {
    uint64_t x = a.second->bytes + a.second->pin_bytes, y = b.second->bytes + b.second->pin_bytes;
    return x != y ? x > y : a.first < b.first;
  });
  SiteRow rest;
  size_t rest_stacks = 0;
  for (size_t i = 0; i < stacks.size(); ++i) {
    uint32_t stack = stacks[i].first;
    const SiteStats& stats = *stacks[i].second;
    if (i >= kMaxStacks) {
      Add(&rest.s, stats);
      ++rest_stacks;
      continue;
    }
    std::string name, title;
    NameSite(&sym, stack, &name, &title);
    SiteRow& row = rows[title.empty() ? name : title];
    row.name = name;
    row.title = title;
    Add(&row.s, stats);
  }
  if (rest_stacks != 0) {
    rest.name = "other sites (" + FormatCount(rest_stacks) + " stacks, not named)";
    rows["\x7f"] = rest;  // a key no site has
  }
  NoteFindingRules(p, &rows);
  std::vector<const SiteRow*> order;
  for (const auto& kv : rows) order.push_back(&kv.second);
  std::sort(order.begin(), order.end(), [](const SiteRow* a, const SiteRow* b) {
    if (a->s.bytes != b->s.bytes) return a->s.bytes > b->s.bytes;
    return a->name < b->name;
  });
  constexpr size_t kMaxRows = 50;
  std::string out =
      "<table class=\"sites sortable\"><thead><tr><th>call site</th><th>copies</th>"
      "<th>bytes</th><th>H2D</th><th>D2H</th><th>host memory</th><th>time in calls</th>"
      "<th>GB/s in sync calls</th><th>pinned allocations</th><th>findings</th></tr></thead><tbody>";
  for (size_t i = 0; i < order.size() && i < kMaxRows; ++i) {
    const SiteRow& r = *order[i];
    out += SiteRowHtml(r);
  }
  out += "</tbody></table>";
  if (order.size() > kMaxRows) {
    out += "<p class=\"note\">" + std::to_string(order.size() - kMaxRows) +
           " more sites with fewer bytes not shown.</p>";
  }
  if (order.empty()) out = "<p class=\"empty\">No copies or pinned allocations.</p>";
  return out;
}

std::string ProcessHtml(const ProcessReport& p, size_t index, const TraceReader* reader,
                        bool many) {
  const ProcessSummary& s = p.summary;
  std::string name = p.info.program.empty() ? std::string("unknown program") : p.info.program;
  std::string out = "<section class=\"process\" id=\"process-" + std::to_string(index) + "\">";
  out += "<h2>" + (many ? "[p" + std::to_string(index) + "] " : std::string()) + Esc(name) +
         " <span class=\"note\">pid " + std::to_string(p.info.pid) +
         (p.info.rank >= 0 ? ", rank " + std::to_string(p.info.rank) : "") +
         (p.info.hostname.empty() ? "" : ", on " + Esc(p.info.hostname)) + ", mode " +
         Esc(p.info.mode) + (p.info.python.empty() ? "" : ", Python " + Esc(p.info.python)) +
         "</span></h2>";
  out += "<p>" + Esc(FormatSeconds(ProcessDurationSeconds(p))) + ", " + FormatCount(s.copies) +
         " copies, " + FormatCount(s.pin_calls) + " pinned-memory calls, " +
         std::to_string(s.threads) + (s.threads == 1 ? " thread" : " threads") + "; peak pinned " +
         Esc(FormatBytes(s.peak_pinned)) +
         (s.peak_rss ? "; peak RSS " + Esc(FormatBytes(s.peak_rss)) : "") + "; " +
         std::to_string(p.findings.size()) + (p.findings.size() == 1 ? " finding" : " findings") +
         ".</p>";
  if (!p.damage.empty()) out += "<p class=\"warn\">" + Esc(p.damage) + "</p>";
  if (p.detail.ended) out += "<p class=\"note\">" + Esc(DetailEndLine(p)) + "</p>";
  for (const std::string& sp : p.symbol_problems)
    out += "<p class=\"note\">symbols: " + Esc(sp) + "</p>";
  if (reader == nullptr) return out + "</section>";
  uint64_t origin =
      p.info.start_monotonic_ns != 0 ? p.info.start_monotonic_ns : reader->first_event_ns();
  uint64_t end = std::max(reader->last_event_ns(), p.summary.last_ns);
  Collector c(origin, end);
  reader->ForEachEvent(&c);
  out += c.Charts(p);
  out += "<h3>Call sites</h3>" + SiteTable(c, *reader, p);
  return out + "</section>";
}

const char kStyle[] = R"CSS(
:root { --fg: #1b1f24; --muted: #5c6570; --line: #d8dde3; --bg: #ffffff; --card: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; padding: 16px 24px 48px; max-width: 1180px; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 6px; }
h3 { font-size: 15px; margin: 10px 0 4px; }
code { font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
.note { color: var(--muted); font-weight: normal; font-size: 12.5px; }
.summary { display: flex; gap: 12px; flex-wrap: wrap; margin: 10px 0 4px; }
.summary div { background: var(--card); border: 1px solid var(--line); border-radius: 6px;
               padding: 6px 12px; } .summary b { font-size: 18px; display: block; }
.finding { border: 1px solid var(--line); border-left: 5px solid #999; border-radius: 6px;
           padding: 6px 14px 8px; margin: 10px 0; background: var(--card); }
.finding.error { border-left-color: #cf222e; } .finding.warning { border-left-color: #d4a72c; }
.finding.info { border-left-color: #0969da; }
.badge { text-transform: uppercase; font-size: 11px; padding: 1px 6px; border-radius: 4px; color: #fff; }
.badge.error { background: #cf222e; } .badge.warning { background: #9a6700; } .badge.info { background: #0969da; }
.lost { color: #cf222e; font-weight: normal; } .site code { font-weight: 600; }
.fix { background: #ddf4ff; border-radius: 4px; padding: 4px 8px; }
table { border-collapse: collapse; margin: 6px 0; } th, td { text-align: left; vertical-align: top;
        padding: 3px 8px; border-bottom: 1px solid var(--line); }
div.evidence { display: flex; flex-wrap: wrap; gap: 2px 16px; font-size: 13px; margin: 6px 0 2px; }
ul.evidence { font-size: 13px; margin: 2px 0; padding-left: 18px; }
.evidence .k { color: var(--muted); }
table.sites { width: 100%; font-size: 13px; } table.sites th { cursor: pointer; background: var(--card); }
table.sites td.name { max-width: 380px; overflow-wrap: anywhere; }
details.stack ol { margin: 4px 0; padding-left: 28px; font: 12px/1.5 ui-monospace, monospace; }
details.stack li.runtime, details.stack li.library { color: var(--muted); }
details.stack li.py { color: #0a3069; } details.stack li.site { font-weight: 700; }
.tag { background: #1f883d; color: #fff; font-size: 10px; padding: 0 4px; border-radius: 3px; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 8px 18px; }
figure.chart { margin: 8px 0; } figcaption { font-weight: 600; margin-bottom: 2px; }
svg.chart { width: 100%; height: auto; background: #fff; }
svg .plot { fill: #fbfcfd; stroke: var(--line); } svg .grid { stroke: #eceff2; }
svg .tick { font-size: 10.5px; fill: var(--muted); }
svg .line { fill: none; stroke-width: 1.8; } svg .limit { stroke-width: 1.5; stroke-dasharray: 6 4; }
.legend { font-size: 12px; color: var(--muted); display: flex; gap: 14px; flex-wrap: wrap; }
.legend i { display: inline-block; width: 14px; height: 3px; margin-right: 5px; vertical-align: middle; }
.legend i.dash { height: 0; border-top: 2px dashed; }
.legend i.dot { width: 7px; height: 7px; border-radius: 50%; }
.empty { color: var(--muted); font-style: italic; } .warn { color: #9a6700; }
#filter { padding: 4px 8px; width: 320px; border: 1px solid var(--line); border-radius: 4px; }
)CSS";

// Sorting of the site tables and the findings filter. Written for the
// browsers of today and for none in particular; nothing is loaded.
const char kScript[] = R"JS(
(function () {
  'use strict';
  var tables = document.querySelectorAll('table.sortable');
  Array.prototype.forEach.call(tables, function (table) {
    var heads = table.querySelectorAll('thead th');
    Array.prototype.forEach.call(heads, function (th, column) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var down = th.getAttribute('data-down') !== '1';
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('data-down'); });
        th.setAttribute('data-down', down ? '1' : '0');
        rows.sort(function (a, b) {
          var x = a.cells[column], y = b.cells[column];
          var vx = x.getAttribute('data-v'), vy = y.getAttribute('data-v');
          var d = (vx !== null && vy !== null) ? Number(vx) - Number(vy)
                                               : x.textContent.localeCompare(y.textContent);
          return down ? -d : d;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  var box = document.getElementById('filter');
  if (box) {
    box.addEventListener('input', function () {
      var q = box.value.toLowerCase();
      var shown = 0;
      var all = document.querySelectorAll('.finding');
      Array.prototype.forEach.call(all, function (el) {
        var hit = el.textContent.toLowerCase().indexOf(q) >= 0;
        el.style.display = hit ? '' : 'none';
        if (hit) shown++;
      });
      document.getElementById('shown').textContent = shown + ' of ' + all.length + ' shown';
    });
  }
  document.body.setAttribute('data-ready', '1');
})();
)JS";

// "sha256-<base64>" of kScript, as the CSP names a script.
std::string ScriptHash() {
  const std::array<uint8_t, 32> digest = Sha256(kScript);
  return "sha256-" + Base64(digest.data(), digest.size());
}

// JSON inside a script element: '<', '>' and '&' occur only inside JSON
// strings, where \u003c, \u003e and \u0026 mean the same characters, and
// then no name can close the element ("</script>"), open a comment ("<!--")
// or start markup in it.
std::string JsonForHtml(const std::string& json) {
  std::string safe;
  safe.reserve(json.size());
  for (char c : json) {
    if (c == '<') {
      safe += "\\u003c";
    } else if (c == '>') {
      safe += "\\u003e";
    } else if (c == '&') {
      safe += "\\u0026";
    } else {
      safe += c;
    }
  }
  return safe;
}

}  // namespace

void WriteHtmlReport(const MergedReport& r, const std::vector<const TraceReader*>& readers,
                     std::string* out) {
  int counts[3] = {0, 0, 0};
  for (const Finding& f : r.findings) ++counts[static_cast<int>(f.severity)];
  const double lost = TotalSecondsLost(r);
  *out +=
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      // Nothing may come from elsewhere, not even by accident, and no script
      // runs but the report's own, named by its hash: markup that a name
      // from a trace might smuggle past the escaping still cannot run.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; script-src '" +
      ScriptHash() +
      "'; img-src data:\">"
      "<title>pinshim report</title><style>";
  *out += kStyle;
  *out += "</style></head><body>";
  *out += "<h1>pinshim report</h1>";
  *out += "<div class=\"summary\"><div><b>" + std::to_string(r.processes.size()) + "</b>" +
          (r.processes.size() == 1 ? "process" : "processes") + "</div><div><b>" +
          std::to_string(r.findings.size()) + "</b>" +
          (r.findings.size() == 1 ? "finding" : "findings") + "</div><div><b>" +
          std::to_string(counts[2]) + " / " + std::to_string(counts[1]) + " / " +
          std::to_string(counts[0]) + "</b>errors / warnings / info</div><div><b>" +
          Esc(FormatSeconds(lost)) + "</b>estimated time lost</div></div>";
  *out += "<p class=\"note\">Bandwidth model: " + Esc(r.model_source) + ".</p>";
  for (const std::string& p : r.problems)
    *out += "<p class=\"warn\">unreadable: " + Esc(p) + "</p>";
  *out += "<h2>Findings, most severe first, then by time lost</h2>";
  if (r.findings.empty()) {
    *out += "<p class=\"empty\">No findings.</p>";
  } else {
    *out +=
        "<p><input id=\"filter\" type=\"search\" placeholder=\"filter findings (rule, file, "
        "function...)\" aria-label=\"filter findings\"> <span id=\"shown\" "
        "class=\"note\"></span></p>";
    for (size_t i = 0; i < r.findings.size(); ++i) *out += FindingHtml(r.findings[i], i, r);
  }
  for (size_t i = 0; i < r.processes.size(); ++i) {
    *out += ProcessHtml(r.processes[i], i, i < readers.size() ? readers[i] : nullptr,
                        r.processes.size() > 1);
  }
  std::string json;
  WriteJsonReport(r, &json);
  *out += "<script type=\"application/json\" id=\"pinshim-report-json\">" + JsonForHtml(json) +
          "</script>";
  *out += "<script>";
  *out += kScript;
  *out += "</script></body></html>\n";
}

}  // namespace report
}  // namespace pinshim
