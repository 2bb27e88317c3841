package docs

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// The repository's root, from this package's directory.
const root = ".."

func repoPages(t *testing.T) []string {
	t.Helper()
	pages, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pages, "README.md") || !slices.Contains(pages, "docs/scaling.md") {
		t.Fatalf("pages %v: README.md or docs/ not found", pages)
	}
	return pages
}

// TestLinks: every relative link and anchor of the pages resolves.
func TestLinks(t *testing.T) {
	for _, p := range CheckLinks(root, repoPages(t)) {
		t.Error(p)
	}
}

// TestMakeTargets: every `make <target>` in a shell block of the pages is a
// target of the Makefile. (The stampede commands: cmd/stampede's
// TestDocsCommands.)
func TestMakeTargets(t *testing.T) {
	for _, p := range CheckMakeTargets(root, repoPages(t)) {
		t.Error(p)
	}
}

// unsourcedList is the file of the figures known to cite no report.
const unsourcedList = "unsourced-figures.txt"

// TestFigures: every figure of the pages cites a report that exists, but
// for those listed in unsourced-figures.txt, each of which must still be
// there.
func TestFigures(t *testing.T) {
	unexpected, stale := matchUnsourced(CheckFigures(root, repoPages(t)), readUnsourced(t))
	for _, p := range unexpected {
		t.Errorf("%s\n\tcite the report it comes from, bench/results/<file> (docs/doc.go, \"Figures\")", p)
	}
	for _, key := range stale {
		t.Errorf("%s: %q is no longer an unsourced figure: remove its line", unsourcedList, key)
	}
}

// matchUnsourced splits the problems of CheckFigures into those that known
// (a set of unsourcedKey) does not accept, and returns the keys of known that
// match no problem.
func matchUnsourced(problems []Problem, known map[string]bool) (unexpected []Problem, stale []string) {
	seen := map[string]bool{}
	for _, p := range problems {
		if key := unsourcedKey(p); key != "" && known[key] {
			seen[key] = true
			continue
		}
		unexpected = append(unexpected, p)
	}
	for key := range known {
		if !seen[key] {
			stale = append(stale, key)
		}
	}
	slices.Sort(stale)
	return unexpected, stale
}

// unsourcedKey is "<page>: <first figure> (of <n>)" for a problem of
// figures without a report, "" for any other problem: a key that survives
// moving the block, not changing its figures.
func unsourcedKey(p Problem) string {
	figures, ok := strings.CutPrefix(p.Msg, figuresWithoutReport)
	if !ok {
		return ""
	}
	list := strings.Split(figures, "; ")
	return fmt.Sprintf("%s: %s (of %d)", p.File, list[0], len(list))
}

func readUnsourced(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(unsourcedList)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	known := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			known[line] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return known
}

// The fixture: a small repository with every kind of problem, at known lines.
const site = "testdata/site"

func sitePages(t *testing.T) []string {
	t.Helper()
	pages, err := Pages(site)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"README.md", "docs/generated.md", "docs/page.md"}
	if !slices.Equal(pages, want) {
		t.Fatalf("fixture pages %v, want %v", pages, want)
	}
	return pages
}

// expect checks that got holds exactly the problems of want, each given as
// "<file>:<line>: <a part of its message>".
func expect(t *testing.T, got []Problem, want ...string) {
	t.Helper()
	used := make([]bool, len(got))
	for _, w := range want {
		loc, part, _ := strings.Cut(w, " ")
		found := false
		for i, p := range got {
			if !used[i] && fmt.Sprintf("%s:%d:", p.File, p.Line) == loc && strings.Contains(p.Msg, part) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("missing problem %s", w)
		}
	}
	for i, p := range got {
		if !used[i] {
			t.Errorf("unexpected problem %s", p)
		}
	}
}

func TestLinksFail(t *testing.T) {
	expect(t, CheckLinks(site, sitePages(t)),
		"README.md:8: docs/nowhere.md does not exist",
		"README.md:8: docs/page.md has no heading or anchor #no-such-heading",
		"README.md:9: script.sh has 3 lines",
		"README.md:9: anchor #main into a file that is not Markdown",
		"README.md:10: leaves the repository",
		"README.md:10: README.md has no heading or anchor #nothing",
	)
}

func TestMakeTargetsFail(t *testing.T) {
	expect(t, CheckMakeTargets(site, sitePages(t)),
		`README.md:18: no target "nosuch"`,
		`README.md:19: no target "missing-too"`,
	)
}

func TestShellCommands(t *testing.T) {
	cmds, err := ShellCommands(site, sitePages(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cmds {
		got = append(got, fmt.Sprintf("%d %s %s | %s", c.Line, c.Tool, strings.Join(c.Args, " "), strings.Join(c.Subcommand(), " ")))
	}
	want := []string{
		"17 make build | build",
		"18 make build nosuch ARGS=--once --twice | build nosuch",
		"19 make -s missing-too | ",
		"20 make -C client notchecked | ",
		"21 stampede token --user 1 | token",
		"22 stampede serve --migrate --roles gateway | serve",
		"24 stampede dlq list [--limit 100] | dlq list",
		"28 stampede nosuchcommand | nosuchcommand",
	}
	if !slices.Equal(got, want) {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFiguresFail(t *testing.T) {
	expect(t, CheckFigures(site, sitePages(t)),
		"README.md:54: figures without a report: 2,000 orders/s",
		"README.md:58: figures without a report: 9,000 orders/s",
		"README.md:80: figures without a report: 3,000 orders/s",
		"README.md:89: report bench/results/missing.md does not exist",
		"README.md:89: figures without a report: 5,000 orders/s",
		"README.md:93: figures without a report: 7,000 orders/s",
		"README.md:99: figures without a report: 1.5; 3",
	)
}

// The list of known unsourced figures accepts exactly its blocks: a new
// figure, a changed block, a missing report and a stale line all fail.
func TestUnsourcedListFail(t *testing.T) {
	known := map[string]bool{
		"README.md: 2,000 orders/s (of 1)": true, // line 54: still there
		"README.md: 9,000 orders/s (of 2)": true, // line 58 has one figure: changed
		"README.md: 8,000 orders/s (of 1)": true, // no such block
	}
	unexpected, stale := matchUnsourced(CheckFigures(site, sitePages(t)), known)
	expect(t, unexpected,
		"README.md:58: 9,000 orders/s",
		"README.md:80: 3,000 orders/s",
		"README.md:89: missing.md does not exist",
		"README.md:89: 5,000 orders/s",
		"README.md:93: 7,000 orders/s",
		"README.md:99: 1.5; 3",
	)
	if want := []string{"README.md: 8,000 orders/s (of 1)", "README.md: 9,000 orders/s (of 2)"}; !slices.Equal(stale, want) {
		t.Errorf("stale %q, want %q", stale, want)
	}
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Draining at flash-sale speed":        "draining-at-flash-sale-speed",
		"requestId: scope and lifetime":       "requestid-scope-and-lifetime",
		"Intake: 1 vs 2 gateway+writer pairs": "intake-1-vs-2-gatewaywriter-pairs",
		"Redis ⇄ MySQL, état":                 "redis--mysql-état",
		"snake_case and `code`":               "snake_case-and-code",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestFiguresIn(t *testing.T) {
	for text, want := range map[string][]string{
		"drained 6,333 orders/s, p99 44 ms, max 1.12 s; 0.44× of it":           {"6,333 orders/s", "0.44×", "44 ms", "1.12 s"},
		"35–36 KB per connection at 2,000/s":                                   {"2,000/s", "35–36 KB"},
		"p99 ≤ 50 ms, at most 500 orders/s, within 2 s, every 500 ms":          nil,
		"the 8,000/s goal; D × 3 commits/s; 1280×720":                          nil,
		"the default e2e intake (10,000/s); default 5 s":                       nil,
		"a setting (" + settingMark + ", 20/s) and" + settingMark + "(2000/s)": nil,
		"v1.2/s, p99" + codeMark + "44 ms":                                     nil,
	} {
		if got := figuresIn(text, false); !slices.Equal(got, want) {
			t.Errorf("figuresIn(%q) = %q, want %q", text, got, want)
		}
	}
	if got := figuresIn("1,039 – 1,266", true); !slices.Equal(got, []string{"1,039 – 1,266"}) {
		t.Errorf("a measured cell: %q", got)
	}
}

// TestSpecRefs: every "docs/spec.md §n[.m]" in the repository's files names a
// section (and numbered item) of docs/spec.md.
func TestSpecRefs(t *testing.T) {
	problems, err := CheckSpecRefs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func TestSpecRefsFail(t *testing.T) {
	problems, err := CheckSpecRefs("testdata/spec")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, problems,
		"refs.md:4: has no section §4",
		"refs.md:4: §5 has no item 3",
		"refs.md:5: §5 has no item 9",
	)
}
