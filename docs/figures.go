package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
)

// The shapes of a figure (package doc, "Figures"). A number: digits with
// thousands commas and decimals, an optional k or M, optionally a range
// (6–9k, 0.8-1.0); lead keeps it from continuing a word or number (p99, v1.2).
const (
	num      = `\d[\d,]*(?:\.\d+)?[kM]?`
	numRange = num + `(?:\s?[–-]\s?` + num + `)?`
	lead     = `(?:^|[^\w.,])`
	timeUnit = `(?:ns|µs|us|ms|s|min)\b`
)

var (
	// 6,333 orders/s, 2,000/s, 25k req/s
	rateFigure = regexp.MustCompile(lead + `(` + numRange + `\s?(?:[A-Za-z]+)?/s)\b`)
	// 0.44×, 10–20× (not 1280×720, a size)
	ratioFigure = regexp.MustCompile(lead + `(` + numRange + `×)(?:[^\d]|$)`)
	// p99 44 ms, max 1.12 s, p50: 0.8–1.0 ms
	statLatency = regexp.MustCompile(`(?i)\b(?:p\d{2}(?:\.\d+)?|max|median|mean)\s*[:=]?\s*(` + numRange + `\s?` + timeUnit + `)`)
	// 35 KB per connection
	sizeFigure = regexp.MustCompile(lead + `(` + numRange + `\s?(?:B|KB|KiB|MB|MiB|GB|GiB|bytes))\s+per\b`)
	// any number: a figure in a table cell whose column or row names a
	// measure (measureWord)
	anyNumber   = regexp.MustCompile(lead + `(` + numRange + `(?:\s?` + timeUnit + `|×)?)`)
	measureWord = regexp.MustCompile(`(?i)\b(?:p\d{2}(?:\.\d+)?|max|median|mean|latency)\b|/s\b|\b(?:ms|µs)\b`)
	// what, before a number, makes it no figure: a bound (a target,
	// threshold or limit), a term of a formula, a setting's value
	notAfter = regexp.MustCompile(`(?:[≤≥<>×*÷\[]|\bat most|\bat least|\bup to|\bwithin|\bunder|\bbelow|\babove|\bover|\bstarts? at|‹setting›\s*[(,])\s*~?\s*$`)
	// what, after a number, makes it a bound
	notBefore   = regexp.MustCompile(`^\s*(?:goal|target|budget|limit|cap|ceiling)\b`)
	defaultWord = regexp.MustCompile(`(?i)\bdefaults?\b`)
	// a default's value: "default 5 s", "default: 5 s", "the default e2e intake (10,000/s)"
	defaultClause = regexp.MustCompile(`\bdefaults?(?:(?:\s+(?:is|of))?\s*[:=(]?|(?:\s+[\w-]+){1,3}\s*\()\s*$`)
	// a report citation: bench/results/<file> (../bench/results/ from docs/)
	reportRef = regexp.MustCompile(`(?:\.\./)?bench/results/([A-Za-z0-9_+-][A-Za-z0-9._+/-]*)`)
)

// figuresIn returns the figures of prose s (code spans already replaced by
// codeMark); measured makes every number one, for a table cell whose column
// or row names a measure.
func figuresIn(s string, measured bool) []string {
	res := []*regexp.Regexp{rateFigure, ratioFigure, statLatency, sizeFigure}
	if measured {
		res = append(res, anyNumber)
	}
	var out []string
	seen := map[int]bool{}
	for _, re := range res {
		for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
			start, end := m[2], m[3]
			before := s[max(0, start-40):start]
			if seen[start] || notAfter.MatchString(before) || defaultClause.MatchString(before) || notBefore.MatchString(s[end:]) {
				continue
			}
			seen[start] = true
			out = append(out, strings.Join(strings.Fields(s[start:end]), " "))
		}
	}
	return out
}

// block is a paragraph, a list item (its own paragraphs, without nested
// lists) or a table: the unit that must cite a report for its figures.
type block struct {
	line      int
	paragraph bool     // a paragraph outside lists (a section's first paragraph is one)
	raw       string   // all its text, code and link targets included: where citations are
	figures   []string // in the order found
	before    int      // index of the block right before it (a list item: the list's), -1 none
	first     int      // index of its section's first paragraph, -1 none
}

// blocks returns p's blocks in document order.
func (p *page) blocks() []block {
	var out []block
	sectionStart := 0 // index of the current section's first block
	listCaption := map[ast.Node]int{}
	previous := func() int {
		if len(out) > sectionStart {
			return len(out) - 1
		}
		return -1
	}
	add := func(b block) {
		b.first = -1
		if len(out) > sectionStart && out[sectionStart].paragraph {
			b.first = sectionStart
		}
		out = append(out, b)
	}
	_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			sectionStart = len(out)
			return ast.WalkSkipChildren, nil
		case *ast.FencedCodeBlock, *ast.CodeBlock, *ast.HTMLBlock:
			return ast.WalkSkipChildren, nil
		case *ast.List:
			listCaption[n] = previous()
		case *ast.ListItem:
			b := block{line: p.nodeLine(n), before: listCaption[n.Parent()]}
			for c := n.FirstChild(); c != nil; c = c.NextSibling() {
				if c.Kind() == ast.KindParagraph || c.Kind() == ast.KindTextBlock {
					b.raw += rawText(c, p.src)
					b.figures = append(b.figures, figuresIn(inlineText(c, p.src, false), false)...)
				}
			}
			add(b)
		case *ast.Paragraph, *ast.TextBlock:
			if _, inItem := n.Parent().(*ast.ListItem); inItem {
				return ast.WalkSkipChildren, nil
			}
			add(block{line: p.nodeLine(n), paragraph: true, before: previous(), raw: rawText(n, p.src),
				figures: figuresIn(inlineText(n, p.src, false), false)})
			return ast.WalkSkipChildren, nil
		case *east.Table:
			add(p.table(n, previous()))
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return out
}

// table is the block of table t. Every number of a data cell is a figure
// when the cell's column header or its row's first cell names a measure (a
// rate /s, ms, p99, max, latency); a column whose header says default holds
// no figures.
func (p *page) table(t *east.Table, before int) block {
	b := block{line: p.nodeLine(t), before: before, raw: rawText(t, p.src)}
	var header []string
	for row := t.FirstChild(); row != nil; row = row.NextSibling() {
		var cells []string
		for c := row.FirstChild(); c != nil; c = c.NextSibling() {
			cells = append(cells, inlineText(c, p.src, false))
		}
		isHeader := row.Kind() == east.KindTableHeader
		if isHeader {
			header = cells
		}
		for i, cell := range cells {
			if i < len(header) && defaultWord.MatchString(header[i]) {
				continue
			}
			measured := !isHeader && i > 0 && (measureWord.MatchString(cells[0]) || i < len(header) && measureWord.MatchString(header[i]))
			b.figures = append(b.figures, figuresIn(cell, measured)...)
		}
	}
	return b
}

// citesReport reports whether s names a report under root's bench/results
// that exists.
func citesReport(root, s string) bool {
	for _, name := range reportNames(s) {
		if _, err := os.Stat(filepath.Join(root, "bench", "results", filepath.FromSlash(name))); err == nil {
			return true
		}
	}
	return false
}

// reportNames are the names after bench/results/ in s; a pattern such as
// bench/results/<date>.md or push-*.md names none.
func reportNames(s string) []string {
	var out []string
	for _, m := range reportRef.FindAllStringSubmatchIndex(s, -1) {
		if m[1] < len(s) && strings.ContainsRune("<{*", rune(s[m[1]])) {
			continue
		}
		out = append(out, strings.TrimRight(s[m[2]:m[3]], "./"))
	}
	return out
}

// figuresWithoutReport starts the message of a block whose figures cite no
// report; the figures follow, separated by "; ".
const figuresWithoutReport = "figures without a report: "

// CheckFigures reports every block of pages with figures that cites no
// report (in itself, its caption — the block right before a table or list,
// the table or list right before a paragraph — or its section's first
// paragraph), and every cited report that does not exist. Generated pages
// are not read for figures.
func CheckFigures(root string, pages []string) []Problem {
	var out []Problem
	for _, rel := range pages {
		p, err := readPage(root, rel)
		if err != nil {
			out = append(out, Problem{File: rel, Line: 1, Msg: err.Error()})
			continue
		}
		for i, line := range strings.Split(string(p.src), "\n") {
			for _, name := range reportNames(line) {
				if _, err := os.Stat(filepath.Join(root, "bench", "results", filepath.FromSlash(name))); err != nil {
					out = append(out, Problem{File: rel, Line: i + 1, Msg: fmt.Sprintf("report bench/results/%s does not exist", name)})
				}
			}
		}
		if p.generated() {
			continue
		}
		blocks := p.blocks()
		cites := func(i int) bool { return i >= 0 && citesReport(root, blocks[i].raw) }
		// a table or list item cites what its caption cites
		cited := func(i int) bool { return cites(i) || i >= 0 && !blocks[i].paragraph && cites(blocks[i].before) }
		for i, b := range blocks {
			// a paragraph's caption is the table or list before it, not another paragraph
			captioned := b.before >= 0 && !(b.paragraph && blocks[b.before].paragraph) && cited(b.before)
			if len(b.figures) == 0 || cited(i) || captioned || cited(b.first) {
				continue
			}
			out = append(out, Problem{File: rel, Line: b.line, Msg: figuresWithoutReport + strings.Join(b.figures, "; ")})
		}
	}
	return out
}
