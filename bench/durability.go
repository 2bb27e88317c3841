package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Redis durability comparison (issue 13): one target per level, each
// scenario's Redis commands per accepted order from INFO commandstats, and a
// per-level table in the report.

// Figure names of the commandstats delta (Options.RedisCommands).
const (
	figRedisCommands = "Redis commands per accepted order"
	figRedisWait     = "Redis WAIT per accepted order"
	figRedisPerReq   = "Redis commands per request"
)

// parseCommandStats reads the answer of INFO commandstats into command →
// calls ("cmdstat_evalsha:calls=12,usec=…" → "evalsha": 12). Lines it does
// not understand are skipped.
func parseCommandStats(info string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		name, ok = strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					out[name] = n
				}
			}
		}
	}
	return out
}

// commandStats is Env.Redis's INFO commandstats (nil when not a single
// server or when INFO fails: the figures are then left out).
func (r *run) commandStats(ctx context.Context) map[string]int64 {
	c, ok := r.env.Redis.(*redis.Client)
	if !ok {
		return nil
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		r.logf("   redis commandstats: %v", err)
		return nil
	}
	return parseCommandStats(info)
}

// commandsPerOrder adds to res the Redis commands its scenario cost since
// before (from the product's creation to the end of its audit: the gateway's
// reserve scripts and WAITs, the pipeline's reads and acks, the audit's
// reads), per accepted order (the figure "accepted"; per request sent when
// the scenario has none), as figures and a per-command table. INFO itself is
// not counted.
func (r *run) commandsPerOrder(ctx context.Context, res *ScenarioResult, before map[string]int64) {
	if before == nil {
		return
	}
	addCommandStats(res, before, r.commandStats(ctx))
}

// addCommandStats adds the figures and table of the delta after - before to
// res (nothing when either is nil).
func addCommandStats(res *ScenarioResult, before, after map[string]int64) {
	if before == nil || after == nil {
		return
	}
	delta := map[string]int64{}
	var total int64
	for name, n := range after {
		if d := n - before[name]; d > 0 && name != "info" {
			delta[name] = d
			total += d
		}
	}
	per, perName, unit := 0.0, figRedisCommands, "per accepted order"
	if v, ok := res.Figure("accepted"); ok && v > 0 {
		per = v
	} else {
		perName, unit = figRedisPerReq, "per request"
		for _, ph := range res.Phases {
			if ph.Result != nil {
				per += float64(ph.Result.Sent)
			}
		}
	}
	if per == 0 {
		return
	}
	res.figure(perName, float64(total)/per, "commands")
	if perName == figRedisCommands {
		res.figure(figRedisWait, float64(delta["wait"])/per, "calls")
	}
	names := make([]string, 0, len(delta))
	for n := range delta {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		return delta[names[i]] > delta[names[j]] || (delta[names[i]] == delta[names[j]] && names[i] < names[j])
	})
	tb := Table{Title: "Redis commands (INFO commandstats delta, product creation to end of audit)", Header: []string{"command", "calls", unit}}
	for _, n := range names {
		tb.Rows = append(tb.Rows, []string{n, strconv.FormatInt(delta[n], 10), strconv.FormatFloat(float64(delta[n])/per, 'f', 3, 64)})
	}
	res.Tables = append(res.Tables, tb)
}

// levelsTable renders the per-level comparison: one column per target
// (durability level), one row per sustained step and figure.
func (r *Report) levelsTable(b *strings.Builder) {
	lt := levelRows{r: r, b: b, labels: make([]string, len(r.Targets))}
	for i, t := range r.Targets {
		lt.labels[i] = t.Label
	}
	b.WriteString("## Intake per Redis durability level (issue 13)\n\n")
	b.WriteString("Levels run back to back in this one invocation, on the same machine, Redis, MySQL and pipeline. ")
	b.WriteString("Orders/s and latencies drift with the machine's load; Redis commands and WAITs per accepted order do not.\n\n")
	fmt.Fprintf(b, "| figure | %s |\n|---|%s\n", strings.Join(lt.labels, " | "), strings.Repeat("--:|", len(lt.labels)))
	for _, name := range r.Scenarios {
		switch name {
		case Sustained:
			lt.sustained()
		case SoldOut:
			lt.soldOut()
		}
	}
	b.WriteString("\n")
}

// levelRows writes the rows of levelsTable: labels are its columns.
type levelRows struct {
	r      *Report
	b      *strings.Builder
	labels []string
}

// row writes one row: name, then cell of each level's result of scenario
// ("—" for none).
func (lt levelRows) row(name string, cell func(s *ScenarioResult) string, scenario string) {
	fmt.Fprintf(lt.b, "| %s |", name)
	for _, l := range lt.labels {
		v := "—"
		if s := lt.r.result(scenario, l); s != nil {
			v = cell(s)
		}
		fmt.Fprintf(lt.b, " %s |", v)
	}
	lt.b.WriteString("\n")
}

// figureCell is a cell of figure name with digits decimals (0: fmtNum).
func figureCell(name string, digits int) func(s *ScenarioResult) string {
	return func(s *ScenarioResult) string {
		v, ok := s.Figure(name)
		if !ok {
			return "—"
		}
		if digits > 0 {
			return strconv.FormatFloat(v, 'f', digits, 64)
		}
		return fmtNum(v)
	}
}

// sustained writes the sustained scenario's rows: every step rate any
// level ran (accepted orders/s and p99), then its figures.
func (lt levelRows) sustained() {
	for _, rate := range lt.stepRates() {
		lt.row(fmt.Sprintf("sustained step %s/s: orders/s (p99)", fmtNum(rate)), func(s *ScenarioResult) string {
			for _, ph := range s.Phases {
				if ph.Rate == rate && ph.Result != nil {
					mark := ""
					if ph.OK != nil && !*ph.OK {
						mark = " ✗"
					}
					return fmt.Sprintf("%s (%s)%s", fmtNum(classRate(ph.Result, classAccepted)), fmtMs(ph.Result.Latency.P99), mark)
				}
			}
			return "—"
		}, Sustained)
	}
	lt.row("sustained: accepted intake, orders/s", func(s *ScenarioResult) string { return fmtNum(s.Headline.Value) }, Sustained)
	lt.row("sustained: highest clean step, req/s", figureCell("highest clean step", 0), Sustained)
	lt.row("sustained: p50 / p95 / p99 at that step", func(s *ScenarioResult) string {
		l := s.HeadlineLatency
		if s.Headline.Value == 0 {
			return "—"
		}
		return fmt.Sprintf("%s / %s / %s", fmtMs(l.P50), fmtMs(l.P95), fmtMs(l.P99))
	}, Sustained)
	lt.row("sustained: "+figRedisCommands, figureCell(figRedisCommands, 2), Sustained)
	lt.row("sustained: "+figRedisWait, figureCell(figRedisWait, 3), Sustained)
	lt.row("sustained: audit", func(s *ScenarioResult) string { return verdict(s.Pass) }, Sustained)
}

// stepRates is every sustained step rate of any level, ascending.
func (lt levelRows) stepRates() []float64 {
	var rates []float64
	for _, l := range lt.labels {
		if s := lt.r.result(Sustained, l); s != nil {
			for _, ph := range s.Phases {
				if !slices.Contains(rates, ph.Rate) {
					rates = append(rates, ph.Rate)
				}
			}
		}
	}
	sort.Float64s(rates)
	return rates
}

// soldOut writes the soldout scenario's rows.
func (lt levelRows) soldOut() {
	lt.row("soldout: rejections/s", func(s *ScenarioResult) string { return fmtNum(s.Headline.Value) }, SoldOut)
	lt.row("soldout: p99", func(s *ScenarioResult) string { return fmtMs(s.HeadlineLatency.P99) }, SoldOut)
	lt.row("soldout: "+figRedisPerReq, figureCell(figRedisPerReq, 2), SoldOut)
	lt.row("soldout: audit", func(s *ScenarioResult) string { return verdict(s.Pass) }, SoldOut)
}
