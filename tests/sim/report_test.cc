// FormatHtml's page: one colour per policy in every chart, startup latency
// on a log axis, misses beside savings, the cost-against-P90 trade-off,
// sections without data left out; and the best line says how it compares.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kiln/sim/scenario.h"

namespace kiln::sim {
namespace {

PolicyResult Policy(std::string name, std::string spot, double cost, std::optional<double> p90) {
  PolicyResult p;
  p.policy = std::move(name);
  p.spot = std::move(spot);
  p.cost = cost;
  p.jobs = 10;
  p.completed = 10;
  if (p90) {
    p.startup_p50 = *p90 / 2;
    p.startup_p90 = p90;
    p.startup_p99 = *p90 * 2;
    // 0 s for the first 10% (warm starts), then up to 2 x P90.
    for (int q = 0; q <= 100; ++q)
      p.startup_quantiles.push_back(q < 10 ? 0.0 : *p90 * 2 * q / 100.0);
  }
  return p;
}

// Three policies (two Fixed(T), one spot) and a slack sweep.
SimulationReport Full() {
  SimulationReport r;
  r.scenario = "s";
  r.horizon = absl::Hours(24);
  r.results.push_back(Policy("JobRequested", "OnDemand", 100, 80));
  r.results.push_back(Policy("Fixed(120s)", "OnDemand", 90, 60));
  r.results.back().fixed_keep_alive = absl::Minutes(2);
  r.results.push_back(Policy("Fixed(1200s)", "OnDemand", 120, 20));
  r.results.back().fixed_keep_alive = absl::Minutes(20);
  r.results.push_back(Policy("JobRequested + Spot(ckpt 600s)", "Spot(ckpt 600s)", 60, 300));
  r.best = 1;
  for (double slack : {1.5, 3.0}) {
    SlackPoint s;
    s.slack = slack;
    s.policy = "Spot(ckpt 600s)";
    s.cost = 40;
    s.on_demand_cost = 80;
    s.savings = 0.5;
    s.deadline_misses = slack < 2 ? 7 : 1;
    r.slack.push_back(s);
  }
  return r;
}

std::vector<std::string> Svgs(const std::string& html) {
  std::vector<std::string> out;
  for (size_t pos = html.find("<svg "); pos != std::string::npos;
       pos = html.find("<svg ", pos + 1)) {
    out.push_back(html.substr(pos, html.find("</svg>", pos) - pos));
  }
  return out;
}

// The colour drawn just before each `>name</text>` (its legend line, dot or
// label), by name.
std::map<std::string, std::set<std::string>> Colours(const std::string& svg,
                                                     const std::vector<std::string>& names) {
  std::map<std::string, std::set<std::string>> out;
  for (const std::string& name : names) {
    const std::string needle = absl::StrCat(">", name, "</text>");
    for (size_t pos = svg.find(needle); pos != std::string::npos; pos = svg.find(needle, pos + 1)) {
      const size_t hash = svg.rfind("=\"#", pos);
      if (hash != std::string::npos) out[name].insert(svg.substr(hash + 2, 7));
    }
  }
  return out;
}

TEST(ReportHtmlTest, EachPolicyHasOneColourInEveryChart) {
  const SimulationReport r = Full();
  const std::string html = FormatHtml(r);
  std::vector<std::string> names;
  for (const PolicyResult& p : r.results) names.push_back(p.policy);
  names.push_back("Spot(ckpt 600s)");
  names.push_back("on-demand");
  const std::vector<std::string> svgs = Svgs(html);
  ASSERT_EQ(svgs.size(), 5u);  // CDF, cost against P90, Fixed(T), savings, misses
  std::map<std::string, std::set<std::string>> all;
  for (const std::string& svg : svgs) {
    for (const auto& [name, colours] : Colours(svg, names))
      all[name].insert(colours.begin(), colours.end());
  }
  std::set<std::string> used;
  for (const PolicyResult& p : r.results) {
    ASSERT_EQ(all[p.policy].size(), 1u) << p.policy;
    EXPECT_TRUE(used.insert(*all[p.policy].begin()).second) << p.policy << " shares a colour";
    // Every policy is in the CDF's and the trade-off's legends.
    EXPECT_TRUE(absl::StrContains(svgs[0], absl::StrCat(">", p.policy, "</text>"))) << p.policy;
    EXPECT_TRUE(absl::StrContains(svgs[1], absl::StrCat(">", p.policy, "</text>"))) << p.policy;
  }
  // The sweep's series named after a spot choice takes the colour of the
  // policy using it; on-demand has a colour of its own.
  EXPECT_EQ(all["Spot(ckpt 600s)"], all["JobRequested + Spot(ckpt 600s)"]);
  ASSERT_EQ(all["on-demand"].size(), 1u);
  EXPECT_FALSE(used.count(*all["on-demand"].begin()));
  // The table's rows carry the same colours.
  for (const PolicyResult& p : r.results) {
    EXPECT_TRUE(absl::StrContains(
        html, absl::StrCat("color:", *all[p.policy].begin(), "\">&#9632;</span>&nbsp;", p.policy)))
        << p.policy;
  }
}

TEST(ReportHtmlTest, StartupLatencyIsOnALogAxisThatSaysWhereZeroIs) {
  SimulationReport r = Full();
  const std::string cdf = Svgs(FormatHtml(r))[0];
  EXPECT_TRUE(absl::StrContains(cdf, "startup latency (s, log scale; 0 s drawn at the left edge)"))
      << cdf;
  // 1-2-5 ticks from the decade below the smallest positive value (4 s,
  // Fixed(1200s) at 10%) up past the largest (600 s).
  for (const char* tick :
       {">1</text>", ">2</text>", ">5</text>", ">10</text>", ">100</text>", ">500</text>"}) {
    EXPECT_TRUE(absl::StrContains(cdf, tick)) << tick;
  }
  EXPECT_FALSE(absl::StrContains(cdf, ">0</text>"));  // no linear axis from 0
  for (const char* bad : {"nan", "inf"}) EXPECT_FALSE(absl::StrContains(cdf, bad)) << bad;

  // Without 0 s the axis does not mention it.
  for (PolicyResult& p : r.results) {
    for (double& q : p.startup_quantiles) q = std::max(q, 3.0);
  }
  EXPECT_TRUE(absl::StrContains(Svgs(FormatHtml(r))[0], ">startup latency (s, log scale)</text>"));
}

TEST(ReportHtmlTest, SlackChartShowsDeadlineMissesBesideSavings) {
  const std::string html = FormatHtml(Full());
  const size_t section = html.find("<h2>Spot savings against deadline slack</h2>");
  ASSERT_NE(section, std::string::npos);
  const std::vector<std::string> svgs = Svgs(html.substr(section));
  ASSERT_EQ(svgs.size(), 2u);
  EXPECT_TRUE(absl::StrContains(svgs[0], "savings vs on-demand"));
  EXPECT_TRUE(absl::StrContains(svgs[1], ">deadline misses</text>"));
  EXPECT_TRUE(
      absl::StrContains(svgs[1], ">7</text>"));  // the y axis reaches the 7 misses at slack 1.5
}

TEST(ReportHtmlTest, CostAgainstP90HasOneLabelledPointPerPolicyWithAP90) {
  SimulationReport r = Full();
  r.results.push_back(Policy("Stuck", "OnDemand", 1, std::nullopt));  // no job began training
  const std::string html = FormatHtml(r);
  const size_t section = html.find("<h2>Cost against startup P90</h2>");
  ASSERT_NE(section, std::string::npos);
  const std::string svg = Svgs(html.substr(section))[0];
  size_t dots = 0;
  for (size_t pos = svg.find("<circle "); pos != std::string::npos;
       pos = svg.find("<circle ", pos + 1))
    ++dots;
  EXPECT_EQ(dots, 2 * (r.results.size() - 1));  // a dot per policy and its legend entry
  EXPECT_TRUE(absl::StrContains(svg, ">Fixed(120s) (best)</text>"));
  EXPECT_TRUE(absl::StrContains(svg, ">JobRequested (baseline)</text>"));
  EXPECT_TRUE(absl::StrContains(svg, ">startup P90 (s)</text>"));
  EXPECT_TRUE(absl::StrContains(svg, ">cost ($)</text>"));
  EXPECT_FALSE(absl::StrContains(svg, "Stuck"));
}

TEST(ReportHtmlTest, SectionsWithoutDataAreLeftOut) {
  SimulationReport r;
  r.scenario = "s";
  r.results.push_back(Policy("Never", "OnDemand", 0, std::nullopt));  // no job began training
  std::string html = FormatHtml(r);
  EXPECT_FALSE(absl::StrContains(html, "<svg")) << html;
  for (const char* section :
       {"Startup latency CDF", "Cost against startup P90", "Cost against keep-alive T",
        "Spot savings against deadline slack", "no data"}) {
    EXPECT_FALSE(absl::StrContains(html, section)) << section;
  }
  EXPECT_TRUE(absl::StrContains(html, "<h2>Policies</h2>"));

  // With a start-up but no Fixed(T) policy and no sweep: the CDF and the trade-off only.
  r.results[0] = Policy("Never", "OnDemand", 5, 30);
  html = FormatHtml(r);
  EXPECT_EQ(Svgs(html).size(), 2u);
  EXPECT_TRUE(absl::StrContains(html, "Startup latency CDF"));
  EXPECT_TRUE(absl::StrContains(html, "Cost against startup P90"));
  EXPECT_FALSE(absl::StrContains(html, "Cost against keep-alive T"));
  EXPECT_FALSE(absl::StrContains(html, "Spot savings against deadline slack"));
}

TEST(ReportHtmlTest, TheBestLineSaysHowFiguresAreCompared) {
  const SimulationReport r = Full();
  for (const std::string& text : {FormatTable(r), FormatHtml(r)}) {
    EXPECT_TRUE(absl::StrContains(text, "(cost compared to the cent, P90 to the second)")) << text;
  }
}

}  // namespace
}  // namespace kiln::sim
