// FormatTable / FormatJson / FormatCsv / FormatHtml of a SimulationReport.
// Everything printed derives from the report alone (no clock, no host
// state), so the same report always gives the same bytes.
#include <algorithm>
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

// The one-line verdict on the best policy.
std::string BestLine(const SimulationReport& r) {
  const PolicyResult& best = r.results[r.best];
  const PolicyResult& base = r.results[r.baseline];
  if (r.best == r.baseline) {
    return absl::StrCat("Best by cost at equal or better latency: ", best.policy,
                        " (the baseline; no cheaper policy has startup P90, deadline misses and completions "
                        "as good)");
  }
  const double saving = base.cost > 0 ? 1.0 - best.cost / base.cost : 0;
  return absl::StrCat("Best by cost at equal or better latency: ", best.policy, ": $", Money(best.cost), " (",
                      Percent(saving), " less than baseline ", base.policy, " at $", Money(base.cost),
                      "), startup P90 ", SecondsText(best.startup_p90), " s vs ", SecondsText(base.startup_p90),
                      " s, deadline misses ", best.deadline_misses, " vs ", base.deadline_misses);
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

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;
  bool markers = false;
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

// `x_max`: points right of it are left out (a long tail would squash the rest).
std::string LineChart(std::vector<Series> series, const std::string& x_label, const std::string& y_label,
                      std::optional<std::pair<double, double>> y_range = std::nullopt, bool y_percent = false,
                      std::optional<double> x_max = std::nullopt) {
  if (x_max) {
    for (Series& s : series) {
      s.points.erase(std::remove_if(s.points.begin(), s.points.end(), [&](const auto& p) { return p.first > *x_max; }),
                     s.points.end());
    }
  }
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : series) {
    for (const auto& [x, y] : s.points) {
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (!(x0 <= x1)) return "<p>(no data)</p>\n";
  if (y_range) std::tie(y0, y1) = *y_range;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) {
    y1 = y0 + (y0 == 0 ? 1 : std::fabs(y0) * 0.1);
    y0 = y0 - (y0 == 0 ? 0 : std::fabs(y0) * 0.1);
  }
  const double xs = NiceStep(x1 - x0, 6), ys = NiceStep(y1 - y0, 5);
  if (!y_range) {
    y0 = std::floor(y0 / ys) * ys;
    y1 = std::ceil(y1 / ys) * ys;
  }
  x0 = std::floor(x0 / xs) * xs;
  x1 = std::ceil(x1 / xs) * xs;
  constexpr double kW = 960, kH = 400, kLeft = 70, kRight = 330, kTop = 20, kBottom = 50;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + ph - (y - y0) / (y1 - y0) * ph; };
  std::string svg = absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", kW, "\" height=\"", kH,
                                 "\" viewBox=\"0 0 ", kW, " ", kH, "\" role=\"img\">\n");
  absl::StrAppend(&svg, "<rect x=\"", kLeft, "\" y=\"", kTop, "\" width=\"", pw, "\" height=\"", ph,
                  "\" fill=\"#fff\" stroke=\"#999\"/>\n");
  for (double x = x0; x <= x1 + xs * 1e-9; x += xs) {
    absl::StrAppend(&svg, "<line x1=\"", Coord(px(x)), "\" y1=\"", kTop, "\" x2=\"", Coord(px(x)), "\" y2=\"",
                    kTop + ph, "\" stroke=\"#eee\"/>\n<text x=\"", Coord(px(x)), "\" y=\"", kTop + ph + 16,
                    "\" text-anchor=\"middle\">", Num(x), "</text>\n");
  }
  for (double y = y0; y <= y1 + ys * 1e-9; y += ys) {
    absl::StrAppend(&svg, "<line x1=\"", kLeft, "\" y1=\"", Coord(py(y)), "\" x2=\"", kLeft + pw, "\" y2=\"",
                    Coord(py(y)), "\" stroke=\"#eee\"/>\n<text x=\"", kLeft - 6, "\" y=\"", Coord(py(y) + 4),
                    "\" text-anchor=\"end\">", y_percent ? absl::StrCat(Num(y * 100), "%") : Num(y), "</text>\n");
  }
  absl::StrAppend(&svg, "<text x=\"", Coord(kLeft + pw / 2), "\" y=\"", kH - 10, "\" text-anchor=\"middle\">",
                  Escape(x_label), "</text>\n<text transform=\"translate(16,", Coord(kTop + ph / 2),
                  ") rotate(-90)\" text-anchor=\"middle\">", Escape(y_label), "</text>\n");
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const char* color = kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))];
    std::vector<std::string> pts;
    for (const auto& [x, y] : s.points) pts.push_back(absl::StrCat(Coord(px(x)), ",", Coord(py(std::clamp(y, y0, y1)))));
    absl::StrAppend(&svg, "<polyline fill=\"none\" stroke=\"", color, "\" stroke-width=\"2\"",
                    s.dashed ? " stroke-dasharray=\"6,4\"" : "", " points=\"", absl::StrJoin(pts, " "), "\"/>\n");
    if (s.markers) {
      for (const auto& [x, y] : s.points) {
        absl::StrAppend(&svg, "<circle cx=\"", Coord(px(x)), "\" cy=\"", Coord(py(std::clamp(y, y0, y1))),
                        "\" r=\"3.5\" fill=\"", color, "\"/>\n");
      }
    }
    const double ly = kTop + 8 + 18.0 * static_cast<double>(i);
    absl::StrAppend(&svg, "<line x1=\"", kLeft + pw + 12, "\" y1=\"", Coord(ly), "\" x2=\"", kLeft + pw + 32,
                    "\" y2=\"", Coord(ly), "\" stroke=\"", color, "\" stroke-width=\"2\"",
                    s.dashed ? " stroke-dasharray=\"6,4\"" : "", "/>\n<text x=\"", kLeft + pw + 38, "\" y=\"",
                    Coord(ly + 4), "\">", Escape(s.name), "</text>\n");
  }
  svg += "</svg>\n";
  return svg;
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
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Kiln simulation: ",
      Escape(r.scenario),
      "</title>\n<style>\n"
      "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}\n"
      "table{border-collapse:collapse;font-size:0.9em}\n"
      "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}\n"
      "th:first-child,td:first-child{text-align:left}\n"
      "tr.best td{background:#e8f5e9;font-weight:600}\n"
      "svg text{font-size:12px;font-family:system-ui,sans-serif}\n"
      ".note{color:#555}\n"
      "</style>\n</head>\n<body>\n<h1>Kiln simulation: ",
      Escape(r.scenario), "</h1>\n<p class=\"note\">Seed ", r.seed, ", horizon ", HorizonText(r.horizon),
      ". Every policy ran through Kiln's engine in virtual time on the same jobs.</p>\n");
  if (!r.description.empty()) absl::StrAppend(&html, "<p>", Escape(r.description), "</p>\n");
  html += "<h2>Policies</h2>\n<table>\n<tr>";
  for (const std::string& h : Header()) absl::StrAppend(&html, "<th>", Escape(h), "</th>");
  html += "</tr>\n";
  for (size_t i = 0; i < r.results.size(); ++i) {
    absl::StrAppend(&html, i == r.best ? "<tr class=\"best\">" : "<tr>");
    for (const std::string& cell : Row(r.results[i])) absl::StrAppend(&html, "<td>", Escape(cell), "</td>");
    html += "</tr>\n";
  }
  absl::StrAppend(&html, "</table>\n<p>", Escape(BestLine(r)), "</p>\n");

  // Startup latency CDF per policy.
  html += "<h2>Startup latency CDF</h2>\n<p class=\"note\">Arrival until training began, per job.</p>\n";
  std::vector<Series> cdf;
  double p99 = 0;
  for (const PolicyResult& p : r.results) {
    p99 = std::max(p99, p.startup_p99.value_or(0));
    Series s{p.policy, {}, false, false};
    for (size_t q = 0; q < p.startup_quantiles.size(); ++q) {
      s.points.emplace_back(p.startup_quantiles[q], static_cast<double>(q) / 100.0);
    }
    if (!s.points.empty()) cdf.push_back(std::move(s));
  }
  html += LineChart(cdf, "startup latency (s)", "fraction of jobs", std::make_pair(0.0, 1.0), true, p99 * 1.1);
  html += "<p class=\"note\">Shown up to 1.1 x the largest P99; the rest of the tail is left out.</p>\n";

  // Cost against Fixed(T).
  html += "<h2>Cost against keep-alive T</h2>\n";
  std::map<std::string, std::vector<std::pair<double, double>>> fixed;  // by spot policy
  for (const PolicyResult& p : r.results) {
    if (p.fixed_keep_alive) fixed[p.spot].emplace_back(absl::ToDoubleMinutes(*p.fixed_keep_alive), p.cost);
  }
  if (fixed.empty()) {
    html += "<p class=\"note\">No Fixed(T) keep-alive policies in this scenario.</p>\n";
  } else {
    std::vector<Series> series;
    double x0 = INFINITY, x1 = -INFINITY;
    for (auto& [spot, points] : fixed) {
      std::sort(points.begin(), points.end());
      x0 = std::min(x0, points.front().first);
      x1 = std::max(x1, points.back().first);
      series.push_back(Series{fixed.size() > 1 ? absl::StrCat("Fixed(T) ", spot) : "Fixed(T)", points, false, true});
    }
    for (const PolicyResult& p : r.results) {
      if (p.fixed_keep_alive) continue;
      series.push_back(Series{p.policy, {{x0, p.cost}, {x1, p.cost}}, true, false});
    }
    html += LineChart(series, "keep-alive T (minutes)", "cost ($)");
    html += "<p class=\"note\">Dashed: the other policies, for reference.</p>\n";
  }

  // Spot savings against deadline slack.
  html += "<h2>Spot savings against deadline slack</h2>\n";
  if (r.slack.empty()) {
    html += "<p class=\"note\">No slack sweep in this scenario (report.slack_sweep).</p>\n";
  } else {
    std::vector<Series> series;
    for (const SlackPoint& s : r.slack) {
      auto it = std::find_if(series.begin(), series.end(), [&](const Series& x) { return x.name == s.policy; });
      if (it == series.end()) {
        series.push_back(Series{s.policy, {}, false, true});
        it = series.end() - 1;
      }
      it->points.emplace_back(s.slack, s.savings);
    }
    html += LineChart(series, "deadline slack (deadline = slack x work)", "savings vs on-demand", std::nullopt, true);
    html += "<table>\n<tr><th>slack</th><th>policy</th><th>cost $</th><th>on-demand $</th><th>savings</th>"
            "<th>deadline misses</th><th>on-demand misses</th></tr>\n";
    for (const SlackPoint& s : r.slack) {
      absl::StrAppend(&html, "<tr><td>", absl::StrFormat("%.2f", s.slack), "</td><td>", Escape(s.policy), "</td><td>",
                      Money(s.cost), "</td><td>", Money(s.on_demand_cost), "</td><td>", Percent(s.savings),
                      "</td><td>", s.deadline_misses, "</td><td>", s.on_demand_misses, "</td></tr>\n");
    }
    html += "</table>\n<p class=\"note\">Spot-eligible workloads only.</p>\n";
  }
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace kiln::sim
