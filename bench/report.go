package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// fmtNum renders n with thousands separators, without decimals from 100 up.
func fmtNum(n float64) string {
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return "n/a"
	}
	if math.Abs(n) < 100 && n != math.Trunc(n) {
		return strconv.FormatFloat(n, 'f', 1, 64)
	}
	s := strconv.FormatInt(int64(math.Round(math.Abs(n))), 10)
	var b strings.Builder
	if n < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtMs renders a duration given in milliseconds.
func fmtMs(ms float64) string {
	switch {
	case ms == 0:
		return "0"
	case ms < 10:
		return strconv.FormatFloat(ms, 'f', 2, 64) + " ms"
	case ms < 1000:
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(ms/1000, 'f', 2, 64) + " s"
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func metText(m *bool) string {
	switch {
	case m == nil:
		return "—"
	case *m:
		return "yes"
	}
	return "**no**"
}

// scenarioGoal is the goal shown on a scenario's summary row.
func (r *Report) scenarioGoal(s *ScenarioResult) (string, *bool) {
	for _, g := range r.Goals {
		if (s.Scenario == Sustained && g.Name == "accepted intake") ||
			(s.Scenario == SoldOut && g.Name == "sold-out rejections") ||
			(s.Scenario == E2E && g.Name == "pipeline drain") {
			if s.Target != r.Targets[0].Label {
				return g.Target, nil
			}
			return g.Target, g.Met
		}
	}
	pass := func() *bool {
		if s.Audit == nil {
			return nil
		}
		return ptr(s.Pass)
	}
	switch s.Scenario {
	case Spike:
		return "accepted = stock, no oversell", pass()
	case Duplicate:
		return "one order and one orderNo per requestId", pass()
	}
	return "", nil
}

// headline renders a scenario's headline with its most telling figure.
func (s *ScenarioResult) headlineText() string {
	out := fmtNum(s.Headline.Value) + " " + s.Headline.Unit
	switch s.Scenario {
	case Spike:
		if v, ok := s.Figure("time to sell out"); ok {
			a, _ := s.Figure("accepted")
			out += fmt.Sprintf("; %s sold in %s", fmtNum(a), fmtMs(v))
		}
	case Sustained:
		if v, ok := s.Figure("highest clean step"); ok {
			out += fmt.Sprintf(" (step %s/s)", fmtNum(v))
		}
	case E2E:
		if v, ok := s.Figure("intake"); ok {
			out += fmt.Sprintf(" (intake %s/s)", fmtNum(v))
		}
	}
	return out
}

// Markdown renders the report: machine, summary table with audit and goals,
// the stream/sync comparison, the ceiling, then each scenario in detail.
func (r *Report) Markdown() string {
	var b strings.Builder
	r.header(&b)
	r.summaryTable(&b)
	r.goalsTable(&b)
	if r.Levels {
		r.levelsTable(&b) // durability.go
	} else if len(r.Targets) > 1 {
		r.comparisonTable(&b)
	}
	if c := r.Ceiling; c != nil {
		fmt.Fprintf(&b, "## Ceiling: redis-benchmark on reserve.lua\n\n%s\n\n", c.line())
		if c.Command != "" {
			fmt.Fprintf(&b, "```\n%s\n```\n\n", c.Command)
		}
	}
	b.WriteString("## Details\n")
	for _, s := range r.Results {
		r.detail(&b, s)
	}
	return b.String()
}

// header writes the title, verdict, command, machine, targets and method.
func (r *Report) header(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("# Stampede benchmark — %s\n\n", r.Started.Format("2006-01-02 15:04 MST"))
	w("**%s** — every scenario's docs/spec.md §5 audit %s. Run %s", verdict(r.Pass), map[bool]string{true: "passed", false: "did not pass"}[r.Pass], r.RunID)
	if r.Quick {
		w(", **quick smoke run**: its numbers say nothing about capacity")
	}
	w(".\n\n")
	if r.Command != "" {
		w("Command:\n\n```\n%s\n```\n\n", r.Command)
	}
	m := r.Machine
	w("Machine: %s, %d cores, %s GB RAM, %s, %s; Redis %s; MySQL %s. Load average at start: %s. ",
		m.CPU, m.Cores, strconv.FormatFloat(float64(m.MemoryMB)/1024, 'f', 1, 64), m.OS, m.GoVersion, orNA(m.Redis), orNA(m.MySQL), orNA(m.LoadAvg))
	w("Redis, RabbitMQ, MariaDB, every Stampede role and the load generator share this machine.\n\n")
	for _, t := range r.Targets {
		w("- target **%s**: %s", t.Label, t.URL)
		if t.Durability != "" {
			w(", Redis durability %s", t.Durability)
		}
		if t.GatewayPID > 0 {
			w(" (memory of pid %d", t.GatewayPID)
			if t.InProcess {
				w(", the bench process itself: every role and the load generator")
			}
			w(")")
		}
		w("\n")
	}
	w("\nMethod: open model, constant arrival rate; latency from each request's scheduled time " +
		"(coordinated omission corrected); HDR histograms; warm-up excluded; throughput = answers per second of the measured window. See bench/README.md.\n\n")
}

// goalsTable writes the issue-5 goals, if the report has any.
func (r *Report) goalsTable(b *strings.Builder) {
	if len(r.Goals) == 0 {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Goals (issue 5)\n\n| goal | target | this run | met |\n|---|---|---|:-:|\n")
	for _, g := range r.Goals {
		w("| %s | %s | %s | %s |\n", g.Name, g.Target, g.Value, metText(g.Met))
	}
	if r.Quick {
		w("\nA quick run does not claim throughput goals.\n")
	}
	w("\n")
}

// comparisonTable writes the first target against the second (the
// baseline): each scenario's headline, p99 and audit side by side.
func (r *Report) comparisonTable(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	a, bl := r.Targets[0].Label, r.Targets[1].Label
	w("## %s vs %s\n\n| scenario | figure | %s | %s | %s / %s |\n|---|---|--:|--:|--:|\n", a, bl, a, bl, a, bl)
	for _, name := range r.Scenarios {
		x, y := r.result(name, a), r.result(name, bl)
		if x == nil || y == nil {
			continue
		}
		ratio := "—"
		if y.Headline.Value > 0 {
			ratio = fmt.Sprintf("%.1f×", x.Headline.Value/y.Headline.Value)
		}
		w("| %s | %s (%s) | %s | %s | %s |\n", name, x.Headline.Name, x.Headline.Unit, fmtNum(x.Headline.Value), fmtNum(y.Headline.Value), ratio)
		w("| %s | p99 | %s | %s | |\n", name, fmtMs(x.HeadlineLatency.P99), fmtMs(y.HeadlineLatency.P99))
		w("| %s | audit | %s | %s | |\n", name, verdict(x.Pass), verdict(y.Pass))
	}
	w("\n")
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

// detail writes one result: its phases, figures, latencies, tables,
// memory, audit and notes.
func (r *Report) detail(b *strings.Builder, s *ScenarioResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("\n### %s — %s", s.Scenario, s.Target)
	if s.ProductID > 0 {
		w(" (product %d)", s.ProductID)
	}
	w(": %s, %.1f s\n\n", verdict(s.Pass), s.ElapsedS)
	if s.Error != "" {
		w("Error: %s\n\n", s.Error)
	}
	phaseTables(b, s)
	if len(s.Figures) > 0 {
		for _, f := range s.Figures {
			v := fmtNum(f.Value)
			if f.Unit == "×" && !math.IsNaN(f.Value) && !math.IsInf(f.Value, 0) { // a ratio: two decimals (0.48 is not 0.5)
				v = strconv.FormatFloat(f.Value, 'f', 2, 64)
			}
			w("- %s: %s %s\n", f.Name, v, f.Unit)
		}
		w("\n")
	}
	latencyTable(b, s)
	for _, tb := range s.Tables {
		w("%s:\n\n| %s |\n|%s\n", tb.Title, strings.Join(tb.Header, " | "), strings.Repeat("---|", len(tb.Header)))
		for _, row := range tb.Rows {
			w("| %s |\n", strings.Join(row, " | "))
		}
		w("\n")
	}
	auditLines(b, s)
}

// phaseTables writes the load phases of s and their outcome classes.
func phaseTables(b *strings.Builder, s *ScenarioResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if len(s.Phases) == 0 {
		return
	}
	w("| phase | rate | sent | measured | answers/s | p50 | p95 | p99 | p99.9 | max | late | abandoned | errors |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, ph := range s.Phases {
		res := ph.Result
		name := ph.Name
		if ph.OK != nil && !*ph.OK {
			name += " ✗"
		}
		l := res.Latency
		w("| %s | %s/s | %d | %d | %s | %s | %s | %s | %s | %s | %d | %d | %d |\n", name, fmtNum(ph.Rate), res.Sent, res.Measured,
			fmtNum(res.Throughput), fmtMs(l.P50), fmtMs(l.P95), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max), res.Late, res.Abandoned, res.Errors)
	}
	w("\nOutcome classes (measured window; latency from the scheduled time):\n\n")
	w("| phase | class | count | per second | p50 | p99 | max |\n|---|---|--:|--:|--:|--:|--:|\n")
	for _, ph := range s.Phases {
		for _, c := range ph.Result.ClassNames() {
			cs := ph.Result.Classes[c]
			w("| %s | %s | %d | %s | %s | %s | %s |\n", ph.Name, c, cs.Count, fmtNum(cs.Rate), fmtMs(cs.Latency.P50), fmtMs(cs.Latency.P99), fmtMs(cs.Latency.Max))
		}
		for _, e := range ph.Result.ErrorSamples {
			w("| %s | error sample | %s | | | | |\n", ph.Name, strings.ReplaceAll(e, "|", "/"))
		}
	}
	w("\n")
}

// latencyTable writes the named latencies of s, by name.
func latencyTable(b *strings.Builder, s *ScenarioResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if len(s.Latencies) == 0 {
		return
	}
	names := make([]string, 0, len(s.Latencies))
	for k := range s.Latencies {
		names = append(names, k)
	}
	sort.Strings(names)
	w("| latency | count | p50 | p95 | p99 | p99.9 | max |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, k := range names {
		l := s.Latencies[k]
		w("| %s | %d | %s | %s | %s | %s | %s |\n", k, l.Count, fmtMs(l.P50), fmtMs(l.P95), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max))
	}
	w("\n")
}

// auditLines writes the memory, audit and notes of s.
func auditLines(b *strings.Builder, s *ScenarioResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if m := s.Memory; m != nil {
		if m.Error != "" {
			w("Memory of pid %d: %s\n\n", m.PID, m.Error)
		} else {
			w("Memory of pid %d: peak RSS sampled %.0f MB, VmHWM %.0f MB\n\n", m.PID, float64(m.PeakRSSKB)*1024/1e6, float64(m.HWMKB)*1024/1e6)
		}
	}
	if a := s.Audit; a != nil {
		w("Audit: %s (pipeline idle: %v after %.1f s; orders %v)\n\n", verdict(a.Pass), a.Idle, a.IdleAfter, a.Orders)
		for _, c := range a.Checks {
			w("- [%s] %s — %s\n", verdict(c.OK), c.Name, c.Detail)
		}
		if a.Error != "" {
			w("- [FAIL] %s\n", a.Error)
		}
		w("\n")
	}
	for _, n := range s.Notes {
		w("Note: %s\n\n", n)
	}
}

// WriteFiles writes the report as <dir>/<stamp>.json and <dir>/<stamp>.md,
// stamp being the start time in UTC (2006-01-02T150405Z), and returns the
// two paths.
func (r *Report) WriteFiles(dir string) (jsonPath, mdPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	stamp := r.Started.UTC().Format("2006-01-02T150405Z")
	jsonPath = filepath.Join(dir, stamp+".json")
	mdPath = filepath.Join(dir, stamp+".md")
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(jsonPath, append(js, '\n'), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(mdPath, []byte(r.Markdown()), 0o644); err != nil {
		return "", "", err
	}
	return jsonPath, mdPath, nil
}

// SummaryMarkdown is Markdown without the per-scenario details: machine,
// summary table, goals, comparison and ceiling.
func (r *Report) SummaryMarkdown() string {
	md := r.Markdown()
	if i := strings.Index(md, "\n## Details"); i >= 0 {
		return md[:i]
	}
	return md
}

// mysqlCeilingRows adds to the summary table, for each drain scenario that
// measured the MySQL ceiling (mysqlceiling.go), the ceiling and each
// design's drain as a ratio to it.
func (r *Report) mysqlCeilingRows(b *strings.Builder) {
	for _, s := range r.Results {
		c, ok := s.Figure("MySQL ceiling")
		if s.Scenario != Drain || !ok {
			continue
		}
		ratios := []string{}
		for _, f := range s.Figures {
			if design, found := strings.CutSuffix(f.Name, ": drain / MySQL ceiling"); found {
				ratios = append(ratios, fmt.Sprintf("%s %.2f×", design, f.Value))
			}
		}
		fmt.Fprintf(b, "| MySQL insert ceiling (order, item, flow; %d per tx) | MySQL | %s orders/s; drain / ceiling: %s | | | | | | |\n",
			mysqlCeilingPerTx, fmtNum(c), strings.Join(ratios, ", "))
	}
}

// summaryTable renders the summary: one row per scenario, then the
// redis-benchmark and MySQL ceilings.
func (r *Report) summaryTable(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Summary\n\n")
	w("| scenario | target | headline | p50 | p95 | p99 | audit | goal | met |\n")
	w("|---|---|---|--:|--:|--:|:-:|---|:-:|\n")
	for _, s := range r.Results {
		l := s.HeadlineLatency
		goal, met := r.scenarioGoal(s)
		audit := verdict(s.Pass)
		if s.Error != "" {
			audit = "FAIL (error)"
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Scenario, s.Target, s.headlineText(),
			fmtMs(l.P50), fmtMs(l.P95), fmtMs(l.P99), audit, goal, metText(met))
	}
	if c := r.Ceiling; c != nil {
		val := c.line()
		if c.Skipped == "" && c.Error == "" {
			val = fmtNum(c.OpsPerSec) + " EVALSHA reserve/s"
		}
		w("| redis-benchmark ceiling | Redis | %s | %s | %s | %s | | | |\n", val, fmtMs(c.P50), fmtMs(c.P95), fmtMs(c.P99))
	}
	r.mysqlCeilingRows(b)
	w("\n")
}
