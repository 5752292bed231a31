// FormatTable / FormatJson / FormatCsv / FormatHtml of a SimulationReport.
// Everything printed derives from the report alone (no clock, no host
// state), so the same report always gives the same bytes.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kiln/plugin/json_value.h"
#include "kiln/sim/scenario.h"

namespace kiln::sim {
namespace {


std::string HorizonText(absl::Duration d) {
  if (d % absl::Hours(24) == absl::ZeroDuration()) return absl::StrCat(d / absl::Hours(24), "d");
  if (d % absl::Hours(1) == absl::ZeroDuration()) return absl::StrCat(d / absl::Hours(1), "h");
  return absl::StrCat(absl::ToInt64Seconds(d), "s");
}

std::string Money(double x) { return absl::StrFormat("%.2f", x); }
std::string Fixed1(double x) { return absl::StrFormat("%.1f", x); }
std::string Percent(double fraction) { return absl::StrFormat("%.1f%%", fraction * 100); }
std::string SecondsText(double s) { return absl::StrFormat("%.0f", s); }
// A startup quantile: "-" when no job began training.
std::string SecondsText(const std::optional<double>& s) { return s ? SecondsText(*s) : "-"; }

// A JSON number with `decimals` digits after the point, written as such
// (a double rounded to 0.01 would print as 4.0200000000000005).
JsonValue Decimal(double x, int decimals) {
  if (!std::isfinite(x)) return JsonValue::Null();  // (not expected)
  return JsonValue::Number(absl::StrFormat("%.*f", decimals, x)).value();
}
// The same, or null when absent.
JsonValue Decimal(const std::optional<double>& x, int decimals) {
  return x ? Decimal(*x, decimals) : JsonValue::Null();
}
// For CSV: the number with one decimal, or an empty field when absent.
std::string CsvSeconds(const std::optional<double>& s) {
  return s ? absl::StrFormat("%.1f", *s) : "";
}

// The one-line verdict on the best policy. RunScenario compares cost and
// startup P90 as the table prints them, and the line says so.
std::string BestLine(const SimulationReport& r) {
  const PolicyResult& best = r.results[r.best];
  const PolicyResult& base = r.results[r.baseline];
  if (r.best == r.baseline) {
    return absl::StrCat(
        "Best by cost at equal or better latency: ", best.policy,
        " (the baseline; no cheaper policy has startup P90, deadline misses and completions "
        "as good; cost compared to the cent, P90 to the second)");
  }
  const double saving = base.cost > 0 ? 1.0 - best.cost / base.cost : 0;
  return absl::StrCat("Best by cost at equal or better latency: ", best.policy, ": $",
                      Money(best.cost), " (", Percent(saving), " less than baseline ", base.policy,
                      " at $", Money(base.cost), "), startup P90 ", SecondsText(best.startup_p90),
                      " s vs ", SecondsText(base.startup_p90), " s, deadline misses ",
                      best.deadline_misses, " vs ", base.deadline_misses,
                      " (cost compared to the cent, P90 to the second)");
}

std::vector<std::string> Header() {
  return {"policy", "jobs", "completed", "cost $", "billable inst-h", "warm inst-h", "warm hits",
          "startup P50 s", "P90 s", "P99 s", "interruptions", "lost work inst-h", "deadline misses"};
}

std::vector<std::string> Row(const PolicyResult& p) {
  return {p.policy,
          absl::StrCat(p.jobs),
          absl::StrCat(p.completed),
          Money(p.cost),
          Fixed1(p.billable_instance_hours),
          Fixed1(p.warm_retained_instance_hours),
          Percent(p.warm_hit_rate),
          SecondsText(p.startup_p50),
          SecondsText(p.startup_p90),
          SecondsText(p.startup_p99),
          absl::StrCat(p.spot_interruptions + p.node_failures),
          Fixed1(p.lost_work_instance_hours),
          absl::StrCat(p.deadline_misses, "/", p.deadline_jobs)};
}

std::string Escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// --- SVG charts

// One colour per policy, by its place in the scenario, in every chart and
// legend; the slack sweep's on-demand runs have their own.
constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f"};
constexpr const char* kOnDemandColor = "#222222";
constexpr const char* kGuideColor = "#bbbbbb";
constexpr const char* kBoundColor = "#888888";  // the slack sweep's omniscient bound

const char* PolicyColor(size_t index) {
  return kPalette[index % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

// The colour of a slack-sweep series, named after its spot choice: that of
// the policy of that name, else of the first policy using that spot choice.
const char* SweepColor(const SimulationReport& r, const std::string& name) {
  if (name == kIdealBoundName) return kBoundColor;
  for (size_t i = 0; i < r.results.size(); ++i) {
    if (r.results[i].policy == name) return PolicyColor(i);
  }
  for (size_t i = 0; i < r.results.size(); ++i) {
    if (r.results[i].spot == name) return PolicyColor(i);
  }
  return kOnDemandColor;
}

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;
  bool line = true;
  bool dashed = false;
  bool markers = false;
  bool legend = true;
  std::vector<std::string> labels;  // written beside the points, when given
};

Series Line(std::string name, std::string color, std::vector<std::pair<double, double>> points = {},
            bool dashed = false, bool markers = false) {
  Series s;
  s.name = std::move(name);
  s.color = std::move(color);
  s.points = std::move(points);
  s.dashed = dashed;
  s.markers = markers;
  return s;
}

// One dot per point, no line between them.
Series Dots(std::string name, std::string color, std::vector<std::pair<double, double>> points,
            std::vector<std::string> labels = {}) {
  Series s = Line(std::move(name), std::move(color), std::move(points), false, true);
  s.line = false;
  s.labels = std::move(labels);
  return s;
}

struct Axis {
  explicit Axis(std::string text) : label(std::move(text)) {}
  Axis& Log() {
    log = true;
    return *this;
  }
  Axis& Percent() {
    percent = true;
    return *this;
  }
  Axis& Integer() {
    integer = true;
    return *this;
  }
  Axis& Pad() {
    pad = true;
    return *this;
  }
  Axis& Range(double lo, double hi) {
    range = std::make_pair(lo, hi);
    return *this;
  }

  std::string label;
  bool log = false;      // base 10; values <= 0 are drawn at the left edge
  bool percent = false;  // fractions shown as percentages
  bool integer = false;  // counts: ticks on whole numbers
  bool pad = false;      // room around the points (scatter)
  std::optional<std::pair<double, double>> range;
};
// Tick step: 1, 2 or 5 times a power of ten, about `count` ticks over `span`.
double NiceStep(double span, int count) {
  if (!(span > 0)) return 1;
  const double raw = span / count;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

std::string Num(double x) {
  if (std::fabs(x) >= 100 || x == std::floor(x)) return absl::StrFormat("%.0f", x);
  return absl::StrFormat("%.3g", x);
}

std::string Coord(double x) { return absl::StrFormat("%.1f", x); }

// An axis's span and ticks, in data units.
struct Scale {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
  bool log = false;
  double T(double v) const { return log ? std::log10(std::max(v, lo)) : v; }
  double Frac(double v) const { return (T(v) - T(lo)) / (T(hi) - T(lo)); }
};

Scale MakeScale(const Axis& axis, double lo, double hi, int count) {
  Scale s;
  s.log = axis.log;
  if (axis.log) {
    // From the decade below the smallest positive value to the next 1, 2 or
    // 5 above the largest.
    if (!(lo > 0)) lo = hi > 0 ? hi : 1;
    if (!(hi > lo)) hi = lo * 10;
    s.lo = std::pow(10.0, std::floor(std::log10(lo) + 1e-9));
    double top = s.lo;
    for (double decade = s.lo; top < hi * (1 - 1e-9); decade *= 10) {
      for (double m : {1.0, 2.0, 5.0}) {
        top = decade * m;
        s.ticks.push_back(top);
        if (top >= hi * (1 - 1e-9)) break;
      }
    }
    s.hi = top;
    if (s.ticks.empty() || s.ticks.back() < s.hi) s.ticks.push_back(s.hi);
    return s;
  }
  if (axis.range) {
    std::tie(lo, hi) = *axis.range;
  } else if (axis.pad && hi > lo) {
    const double margin = (hi - lo) * 0.08;
    lo = lo >= 0 ? std::max(0.0, lo - margin) : lo - margin;
    hi += margin;
  }
  if (hi == lo) {
    const double margin = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    hi = lo + margin;
    if (lo != 0) lo -= margin;
  }
  double step = NiceStep(hi - lo, count);
  if (axis.integer) step = std::max(1.0, std::round(step));
  if (!axis.range) {
    lo = std::floor(lo / step) * step;
    hi = std::ceil(hi / step) * step;
  }
  s.lo = lo;
  s.hi = hi;
  for (double v = lo; v <= hi + step * 1e-9; v += step) s.ticks.push_back(v);
  return s;
}

// The chart, or "" when no series has a point.
std::string Chart(const std::vector<Series>& series, const Axis& x_axis, const Axis& y_axis,
                  std::optional<std::pair<double, double>> guide = std::nullopt) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY, x_pos = INFINITY;
  for (const Series& s : series) {
    for (const auto& [x, y] : s.points) {
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
      if (x > 0) x_pos = std::min(x_pos, x);
    }
  }
  if (!(x0 <= x1)) return "";
  const Scale xs = MakeScale(x_axis, x_axis.log ? x_pos : x0, x1, 6);
  const Scale ys = MakeScale(y_axis, y0, y1, 5);
  constexpr double kW = 960, kH = 400, kLeft = 70, kRight = 330, kTop = 20, kBottom = 50;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto px = [&](double x) { return kLeft + std::clamp(xs.Frac(x), 0.0, 1.0) * pw; };
  auto py = [&](double y) { return kTop + ph - std::clamp(ys.Frac(y), 0.0, 1.0) * ph; };
  std::string svg = absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", kW, "\" height=\"", kH,
                                 "\" viewBox=\"0 0 ", kW, " ", kH, "\" role=\"img\">\n");
  absl::StrAppend(&svg, "<rect x=\"", kLeft, "\" y=\"", kTop, "\" width=\"", pw, "\" height=\"", ph,
                  "\" fill=\"#fff\" stroke=\"#999\"/>\n");
  for (double x : xs.ticks) {
    absl::StrAppend(&svg, "<line x1=\"", Coord(px(x)), "\" y1=\"", kTop, "\" x2=\"", Coord(px(x)), "\" y2=\"",
                    kTop + ph, "\" stroke=\"#eee\"/>\n<text x=\"", Coord(px(x)), "\" y=\"", kTop + ph + 16,
                    "\" text-anchor=\"middle\">", Num(x), "</text>\n");
  }
  for (double y : ys.ticks) {
    absl::StrAppend(&svg, "<line x1=\"", kLeft, "\" y1=\"", Coord(py(y)), "\" x2=\"", kLeft + pw,
                    "\" y2=\"", Coord(py(y)), "\" stroke=\"#eee\"/>\n<text x=\"", kLeft - 6,
                    "\" y=\"", Coord(py(y) + 4), "\" text-anchor=\"end\">",
                    y_axis.percent ? absl::StrCat(Num(y * 100), "%") : Num(y), "</text>\n");
  }
  absl::StrAppend(&svg, "<text x=\"", Coord(kLeft + pw / 2), "\" y=\"", kH - 10,
                  "\" text-anchor=\"middle\">", Escape(x_axis.label),
                  "</text>\n<text transform=\"translate(16,", Coord(kTop + ph / 2),
                  ") rotate(-90)\" text-anchor=\"middle\">", Escape(y_axis.label), "</text>\n");
  if (guide) {
    absl::StrAppend(&svg, "<line x1=\"", Coord(px(guide->first)), "\" y1=\"", kTop, "\" x2=\"",
                    Coord(px(guide->first)), "\" y2=\"", kTop + ph, "\" stroke=\"", kGuideColor,
                    "\" stroke-dasharray=\"3,3\"/>\n<line x1=\"", kLeft, "\" y1=\"",
                    Coord(py(guide->second)), "\" x2=\"", kLeft + pw, "\" y2=\"",
                    Coord(py(guide->second)), "\" stroke=\"", kGuideColor,
                    "\" stroke-dasharray=\"3,3\"/>\n");
  }
  // Point labels: right of the point, else left, moved up or down off the
  // labels already placed (width guessed from the length).
  std::vector<std::array<double, 4>> placed;  // x0, y0, x1, y1
  auto place_label = [&](double cx, double cy, const std::string& text) {
    const double w = 6.5 * static_cast<double>(text.size()), h = 13;
    const bool left = cx + 7 + w > kLeft + pw;
    const double x = left ? cx - 7 - w : cx + 7;
    double y = cy - 7;
    for (int k = 1; k < 40; ++k) {
      const bool clash =
          std::any_of(placed.begin(), placed.end(), [&](const std::array<double, 4>& b) {
            return x < b[2] && b[0] < x + w && y - h < b[3] && b[1] < y;
          });
      if (!clash) break;
      y = cy - 7 + (k % 2 == 1 ? 1 : -1) * 14.0 * ((k + 1) / 2);
    }
    placed.push_back({x, y - h, x + w, y});
    return std::make_pair(x, y);
  };
  int legend_row = 0;
  for (const Series& s : series) {
    const std::string dash = s.dashed ? " stroke-dasharray=\"6,4\"" : "";
    if (s.line && !s.points.empty()) {
      std::vector<std::string> pts;
      for (const auto& [x, y] : s.points)
        pts.push_back(absl::StrCat(Coord(px(x)), ",", Coord(py(y))));
      absl::StrAppend(&svg, "<polyline fill=\"none\" stroke=\"", s.color, "\" stroke-width=\"2\"",
                      dash, " points=\"", absl::StrJoin(pts, " "), "\"/>\n");
    }
    for (size_t k = 0; k < s.points.size(); ++k) {
      const double cx = px(s.points[k].first), cy = py(s.points[k].second);
      if (s.markers) {
        absl::StrAppend(&svg, "<circle cx=\"", Coord(cx), "\" cy=\"", Coord(cy), "\" r=\"",
                        s.line ? "3.5" : "5", "\" fill=\"", s.color, "\"/>\n");
      }
      if (k < s.labels.size() && !s.labels[k].empty()) {
        const auto [lx, ly] = place_label(cx, cy, s.labels[k]);
        absl::StrAppend(&svg, "<text x=\"", Coord(lx), "\" y=\"", Coord(ly), "\" fill=\"", s.color,
                        "\">", Escape(s.labels[k]), "</text>\n");
      }
    }
    if (!s.legend) continue;
    const double ly = kTop + 8 + 18.0 * legend_row++;
    if (s.line) {
      absl::StrAppend(&svg, "<line x1=\"", kLeft + pw + 12, "\" y1=\"", Coord(ly), "\" x2=\"",
                      kLeft + pw + 32, "\" y2=\"", Coord(ly), "\" stroke=\"", s.color,
                      "\" stroke-width=\"2\"", dash, "/>\n");
    }
    if (s.markers) {
      absl::StrAppend(&svg, "<circle cx=\"", kLeft + pw + 22, "\" cy=\"", Coord(ly), "\" r=\"",
                      s.line ? "3.5" : "5", "\" fill=\"", s.color, "\"/>\n");
    }
    absl::StrAppend(&svg, "<text x=\"", kLeft + pw + 38, "\" y=\"", Coord(ly + 4), "\">",
                    Escape(s.name), "</text>\n");
  }
  svg += "</svg>\n";
  return svg;
}

// A square in a policy's colour, before its name in a table (a no-break
// space keeps it on the name's line).
std::string Swatch(const std::string& color) {
  return absl::StrCat("<span class=\"swatch\" style=\"color:", color, "\">&#9632;</span>&nbsp;");
}

}  // namespace

std::string FormatTable(const SimulationReport& r) {
  std::vector<std::vector<std::string>> rows = {Header()};
  for (const PolicyResult& p : r.results) rows.push_back(Row(p));
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out = absl::StrCat("Scenario ", r.scenario, " (seed ", r.seed, ", horizon ", HorizonText(r.horizon), ")\n");
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      absl::StrAppend(&out, c == 0 ? "" : "  ", c == 0 ? row[c] + pad : pad + row[c]);
    }
    out += "\n";
  }
  for (const PolicyResult& p : r.results) {
    if (p.rejected > 0) {
      absl::StrAppend(&out, "warning: ", p.policy, ": ", p.rejected, " job(s) refused; first: ", p.first_error, "\n");
    }
  }
  absl::StrAppend(&out, BestLine(r), "\n");
  if (!r.slack.empty()) {
    out += "Spot savings against deadline slack (spot-eligible jobs only; vs on-demand):\n";
    for (const SlackPoint& s : r.slack) {
      absl::StrAppend(&out, "  slack ", absl::StrFormat("%.2f", s.slack), "  ", s.policy, ": $", Money(s.cost),
                      " vs $", Money(s.on_demand_cost), " on-demand, savings ", Percent(s.savings),
                      ", deadline misses ", s.deadline_misses, " (on-demand ", s.on_demand_misses, ")\n");
    }
  }
  return out;
}

std::string FormatJson(const SimulationReport& r) {
  JsonValue doc = JsonValue::Object();
  doc.Set("scenario", JsonValue::String(r.scenario))
      .Set("seed", JsonValue::Uint(r.seed))
      .Set("horizon_seconds", JsonValue::Int(absl::ToInt64Seconds(r.horizon)))
      .Set("baseline", JsonValue::String(r.results[r.baseline].policy))
      .Set("best", JsonValue::String(r.results[r.best].policy));
  JsonValue policies = JsonValue::Array();
  for (const PolicyResult& p : r.results) {
    JsonValue o = JsonValue::Object();
    o.Set("policy", JsonValue::String(p.policy))
        .Set("keep_alive", JsonValue::String(p.keep_alive))
        .Set("spot", JsonValue::String(p.spot))
        .Set("jobs", JsonValue::Int(p.jobs))
        .Set("completed", JsonValue::Int(p.completed))
        .Set("failed", JsonValue::Int(p.failed))
        .Set("stopped", JsonValue::Int(p.stopped))
        .Set("rejected", JsonValue::Int(p.rejected))
        .Set("cost", Decimal(p.cost, 2))
        .Set("billable_instance_hours", Decimal(p.billable_instance_hours, 3))
        .Set("spot_instance_hours", Decimal(p.spot_instance_hours, 3))
        .Set("warm_retained_instance_hours", Decimal(p.warm_retained_instance_hours, 3))
        .Set("warm_hit_rate", Decimal(p.warm_hit_rate, 4))
        .Set("startup_p50_seconds", Decimal(p.startup_p50, 1))
        .Set("startup_p90_seconds", Decimal(p.startup_p90, 1))
        .Set("startup_p99_seconds", Decimal(p.startup_p99, 1))
        .Set("spot_interruptions", JsonValue::Int(p.spot_interruptions))
        .Set("node_failures", JsonValue::Int(p.node_failures))
        .Set("migrations", JsonValue::Int(p.migrations))
        .Set("lost_work_instance_hours", Decimal(p.lost_work_instance_hours, 3))
        .Set("deadline_jobs", JsonValue::Int(p.deadline_jobs))
        .Set("deadline_misses", JsonValue::Int(p.deadline_misses));
    if (!p.first_error.empty()) o.Set("first_error", JsonValue::String(p.first_error));
    policies.Push(std::move(o));
  }
  doc.Set("policies", std::move(policies));
  JsonValue slack = JsonValue::Array();
  for (const SlackPoint& s : r.slack) {
    JsonValue o = JsonValue::Object();
    o.Set("slack", JsonValue::Double(s.slack))
        .Set("policy", JsonValue::String(s.policy))
        .Set("cost", Decimal(s.cost, 2))
        .Set("on_demand_cost", Decimal(s.on_demand_cost, 2))
        .Set("savings", Decimal(s.savings, 4))
        .Set("deadline_misses", JsonValue::Int(s.deadline_misses))
        .Set("on_demand_deadline_misses", JsonValue::Int(s.on_demand_misses));
    slack.Push(std::move(o));
  }
  doc.Set("slack_sweep", std::move(slack));
  return WriteJson(doc, /*indent=*/true) + "\n";
}

std::string FormatCsv(const SimulationReport& r) {
  std::string out =
      "policy,keep_alive,spot,jobs,completed,failed,stopped,rejected,cost,billable_instance_hours,"
      "spot_instance_hours,warm_retained_instance_hours,warm_hit_rate,startup_p50_s,startup_p90_s,startup_p99_s,"
      "spot_interruptions,node_failures,migrations,lost_work_instance_hours,deadline_jobs,deadline_misses\n";
  for (const PolicyResult& p : r.results) {
    absl::StrAppend(
        &out, CsvField(p.policy), ",", CsvField(p.keep_alive), ",", CsvField(p.spot), ",", p.jobs,
        ",", p.completed, ",", p.failed, ",", p.stopped, ",", p.rejected, ",", Money(p.cost), ",",
        absl::StrFormat("%.3f,%.3f,%.3f,%.4f,", p.billable_instance_hours, p.spot_instance_hours,
                        p.warm_retained_instance_hours, p.warm_hit_rate),
        CsvSeconds(p.startup_p50), ",", CsvSeconds(p.startup_p90), ",", CsvSeconds(p.startup_p99),
        ",", p.spot_interruptions, ",", p.node_failures, ",", p.migrations, ",",
        absl::StrFormat("%.3f", p.lost_work_instance_hours), ",", p.deadline_jobs, ",",
        p.deadline_misses, "\n");
  }
  return out;
}

std::string FormatHtml(const SimulationReport& r) {
  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Kiln "
      "simulation: ",
      Escape(r.scenario),
      "</title>\n<style>\n"
      "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}\n"
      "table{border-collapse:collapse;font-size:0.9em}\n"
      "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}\n"
      "th:first-child,td:first-child,td.name{text-align:left}\n"
      "tr.best td{background:#e8f5e9;font-weight:600}\n"
      ".swatch{font-size:1.1em}\n"
      "svg text{font-size:12px;font-family:system-ui,sans-serif}\n"
      ".note{color:#555}\n"
      "</style>\n</head>\n<body>\n<h1>Kiln simulation: ",
      Escape(r.scenario), "</h1>\n<p class=\"note\">Seed ", r.seed, ", horizon ",
      HorizonText(r.horizon),
      ". Every policy ran through Kiln's engine in virtual time on the same jobs.</p>\n");
  if (!r.description.empty()) absl::StrAppend(&html, "<p>", Escape(r.description), "</p>\n");
  html += "<h2>Policies</h2>\n<table>\n<tr>";
  for (const std::string& h : Header()) absl::StrAppend(&html, "<th>", Escape(h), "</th>");
  html += "</tr>\n";
  for (size_t i = 0; i < r.results.size(); ++i) {
    absl::StrAppend(&html, i == r.best ? "<tr class=\"best\">" : "<tr>");
    const std::vector<std::string> row = Row(r.results[i]);
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&html, "<td>", c == 0 ? Swatch(PolicyColor(i)) : "", Escape(row[c]), "</td>");
    }
    html += "</tr>\n";
  }
  absl::StrAppend(&html, "</table>\n<p>", Escape(BestLine(r)), "</p>\n");

  // Startup latency CDF per policy, on a log axis (start-ups span warm
  // seconds to cold minutes).
  std::vector<Series> cdf;
  bool zero = false;
  for (size_t i = 0; i < r.results.size(); ++i) {
    const PolicyResult& p = r.results[i];
    Series s = Line(p.policy, PolicyColor(i));
    for (size_t q = 0; q < p.startup_quantiles.size(); ++q) {
      s.points.emplace_back(p.startup_quantiles[q], static_cast<double>(q) / 100.0);
      zero = zero || p.startup_quantiles[q] <= 0;
    }
    if (!s.points.empty()) cdf.push_back(std::move(s));
  }
  if (!cdf.empty()) {
    html +=
        "<h2>Startup latency CDF</h2>\n<p class=\"note\">Arrival until training began, per "
        "job.</p>\n";
    html += Chart(cdf,
                  Axis(zero ? "startup latency (s, log scale; 0 s drawn at the left edge)"
                            : "startup latency (s, log scale)")
                      .Log(),
                  Axis("fraction of jobs").Percent().Range(0, 1));
  }

  // Cost against startup P90: the trade-off, one point per policy.
  std::vector<Series> trade;
  for (size_t i = 0; i < r.results.size(); ++i) {
    const PolicyResult& p = r.results[i];
    if (!p.startup_p90) continue;
    std::string label = p.policy;
    if (i == r.best) label += " (best)";
    if (i == r.baseline && i != r.best) label += " (baseline)";
    trade.push_back(Dots(p.policy, PolicyColor(i), {{*p.startup_p90, p.cost}}, {label}));
  }
  if (!trade.empty()) {
    const PolicyResult& base = r.results[r.baseline];
    html += "<h2>Cost against startup P90</h2>\n";
    html +=
        Chart(trade, Axis("startup P90 (s)").Pad(), Axis("cost ($)").Pad(),
              base.startup_p90 ? std::make_optional(std::make_pair(*base.startup_p90, base.cost))
                               : std::nullopt);
    absl::StrAppend(
        &html, "<p class=\"note\">",
        base.startup_p90 ? absl::StrCat("Dotted lines: the baseline, ", Escape(base.policy),
                                        "; down and left of both is cheaper and faster. ")
                         : "",
        "Policies under which no job began training have no P90 and are left out.</p>\n");
  }

  // Cost against Fixed(T).
  std::map<std::string, std::vector<std::pair<double, size_t>>>
      fixed;  // by spot policy: (T minutes, policy)
  for (size_t i = 0; i < r.results.size(); ++i) {
    const PolicyResult& p = r.results[i];
    if (p.fixed_keep_alive)
      fixed[p.spot].emplace_back(absl::ToDoubleMinutes(*p.fixed_keep_alive), i);
  }
  if (!fixed.empty()) {
    html += "<h2>Cost against keep-alive T</h2>\n";
    std::vector<Series> series;
    double x0 = INFINITY, x1 = -INFINITY;
    for (auto& [spot, points] : fixed) {
      std::sort(points.begin(), points.end());
      x0 = std::min(x0, points.front().first);
      x1 = std::max(x1, points.back().first);
      Series line =
          Line(fixed.size() > 1 ? absl::StrCat("Fixed(T) ", spot) : "Fixed(T)", kGuideColor);
      for (const auto& [t, i] : points) line.points.emplace_back(t, r.results[i].cost);
      series.push_back(std::move(line));
    }
    for (size_t i = 0; i < r.results.size(); ++i) {
      const PolicyResult& p = r.results[i];
      if (p.fixed_keep_alive) {
        series.push_back(
            Dots(p.policy, PolicyColor(i), {{absl::ToDoubleMinutes(*p.fixed_keep_alive), p.cost}}));
      } else {
        series.push_back(
            Line(p.policy, PolicyColor(i), {{x0, p.cost}, {x1, p.cost}}, /*dashed=*/true));
      }
    }
    html += Chart(series, Axis("keep-alive T (minutes)"), Axis("cost ($)"));
    html +=
        "<p class=\"note\">Dots: the Fixed(T) policies; dashed: the other policies, for "
        "reference.</p>\n";
  }

  // Spot savings and deadline misses against deadline slack.
  if (!r.slack.empty()) {
    html += "<h2>Spot savings against deadline slack</h2>\n";
    std::vector<Series> savings, misses;
    Series od_misses = Line("on-demand", kOnDemandColor, {}, /*dashed=*/true, /*markers=*/true);
    for (const SlackPoint& s : r.slack) {
      auto it = std::find_if(savings.begin(), savings.end(),
                             [&](const Series& x) { return x.name == s.policy; });
      if (it == savings.end()) {
        savings.push_back(Line(s.policy, SweepColor(r, s.policy), {},
                               /*dashed=*/s.policy == kIdealBoundName, /*markers=*/true));
        misses.push_back(savings.back());
        it = savings.end() - 1;
      }
      it->points.emplace_back(s.slack, s.savings);
      misses[static_cast<size_t>(it - savings.begin())].points.emplace_back(
          s.slack, static_cast<double>(s.deadline_misses));
      if (od_misses.points.empty() || od_misses.points.back().first != s.slack) {
        od_misses.points.emplace_back(s.slack, static_cast<double>(s.on_demand_misses));
      }
    }
    misses.push_back(std::move(od_misses));
    const std::string x_label = "deadline slack (deadline = slack x work)";
    html += Chart(savings, Axis(x_label), Axis("savings vs on-demand").Percent());
    html += "<p class=\"note\">Deadline misses at the same slack points (dashed: on-demand):</p>\n";
    html += Chart(misses, Axis(x_label), Axis("deadline misses").Integer());
    html += "<table>\n<tr><th>slack</th><th>policy</th><th>cost $</th><th>on-demand $</th><th>savings</th>"
            "<th>deadline misses</th><th>on-demand misses</th></tr>\n";
    for (const SlackPoint& s : r.slack) {
      absl::StrAppend(&html, "<tr><td>", absl::StrFormat("%.2f", s.slack),
                      "</td><td class=\"name\">", Swatch(SweepColor(r, s.policy)), Escape(s.policy),
                      "</td><td>", Money(s.cost), "</td><td>", Money(s.on_demand_cost), "</td><td>",
                      Percent(s.savings), "</td><td>", s.deadline_misses, "</td><td>",
                      s.on_demand_misses, "</td></tr>\n");
    }
    html +=
        "</table>\n<p class=\"note\">Spot-eligible workloads only; each spot choice runs with the "
        "baseline's keep-alive, in the colour of the first policy using it. The omniscient bound "
        "(dashed grey) is the least each job could cost knowing its spot trace in advance, "
        "changing capacity only at trace ticks, each change costing the time the job took to "
        "start on on-demand; it counts each job alone, as if no other job wanted the same spot "
        "instances, and its savings are against on-demand in the same model.</p>\n";
  }
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace kiln::sim
