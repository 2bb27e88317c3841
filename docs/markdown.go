package docs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// Problem is one thing a check found wrong in a page.
type Problem struct {
	File string // slash-separated, relative to the repository root
	Line int    // 1-based
	Msg  string
}

func (p Problem) String() string {
	if p.File == "" {
		return p.Msg
	}
	return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
}

// Pages returns the pages the checks cover, slash-separated and relative to
// root: README.md, every docs/*.md and every README.md one directory down
// (bench/README.md, client/README.md).
func Pages(root string) ([]string, error) {
	var out []string
	for _, pattern := range []string{"README.md", "docs/*.md", "*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		if err != nil {
			return nil, err
		}
		for _, p := range m {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return nil, err
			}
			out = append(out, filepath.ToSlash(rel))
		}
	}
	sort.Strings(out)
	return out, nil
}

// page is one parsed Markdown file.
type page struct {
	path       string // relative to the root, slash-separated
	src        []byte
	doc        ast.Node
	lineStarts []int // byte offset of each line's start
}

var markdown = goldmark.New(goldmark.WithExtensions(extension.Table))

func readPage(root, rel string) (*page, error) {
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	p := &page{path: rel, src: src, doc: markdown.Parser().Parse(text.NewReader(src)), lineStarts: []int{0}}
	for i, b := range src {
		if b == '\n' {
			p.lineStarts = append(p.lineStarts, i+1)
		}
	}
	return p, nil
}

// line is the 1-based line of byte offset off.
func (p *page) line(off int) int {
	return sort.Search(len(p.lineStarts), func(i int) bool { return p.lineStarts[i] > off })
}

// nodeLine is the line where n's text starts: its first line for a block,
// the first text inside it for an inline node (the enclosing block's first
// line when it has none).
func (p *page) nodeLine(n ast.Node) int {
	off := -1
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		if t, ok := c.(*ast.Text); ok {
			off = t.Segment.Start
			return ast.WalkStop, nil
		}
		if c.Type() == ast.TypeBlock && c.Lines().Len() > 0 {
			off = c.Lines().At(0).Start
			return ast.WalkStop, nil
		}
		return ast.WalkContinue, nil
	})
	for b := n; off < 0 && b != nil; b = b.Parent() {
		if b.Type() == ast.TypeBlock && b.Lines().Len() > 0 {
			off = b.Lines().At(0).Start
		}
	}
	return p.line(max(off, 0))
}

// codeMark stands for a code span in prose: code is never a figure, and the
// mark keeps the words on either side of it apart. settingMark stands for a
// code span that names a setting or a flag (`STAMPEDE_ROOM_CEILING`,
// `--rate`): the number right after it is its value.
const (
	codeMark    = " ‹code› "
	settingMark = " ‹setting› "
)

var settingName = regexp.MustCompile(`^(?:STAMPEDE_[A-Z0-9_]+|--?[a-z][a-z0-9-]*)(?:=\S*)?$`)

// inlineText is the text a reader sees in n's inline content: emphasis and
// links reduced to their text, raw HTML dropped. Code spans are their
// content when withCode, else codeMark.
func inlineText(n ast.Node, src []byte, withCode bool) string {
	var b strings.Builder
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		for c := n.FirstChild(); c != nil; c = c.NextSibling() {
			switch c := c.(type) {
			case *ast.Text:
				b.Write(c.Value(src))
				if c.SoftLineBreak() || c.HardLineBreak() {
					b.WriteByte(' ')
				}
			case *ast.String:
				b.Write(c.Value)
			case *ast.CodeSpan:
				switch {
				case withCode:
					walk(c)
				case settingName.MatchString(inlineText(c, src, true)):
					b.WriteString(settingMark)
				default:
					b.WriteString(codeMark)
				}
			case *ast.RawHTML, *ast.AutoLink:
			default:
				walk(c)
			}
		}
	}
	walk(n)
	return b.String()
}

// rawText is every text of n's inline content, code spans included, and the
// destination of every link in it: where a report citation is looked for.
func rawText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Value(src))
			b.WriteByte(' ')
		case *ast.Link:
			b.Write(c.Destination)
			b.WriteByte(' ')
		case *ast.Image:
			b.Write(c.Destination)
			b.WriteByte(' ')
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// htmlAnchor finds the id or name attributes that raw HTML in a page gives
// as link targets (<a id="x">, <a name="x">).
var htmlAnchor = regexp.MustCompile(`<a\s[^>]*\b(?:id|name)="([^"]+)"`)

// anchors returns every anchor a link into p may name: the GitHub slug of
// each heading (a repeated slug gets -1, -2, … as GitHub numbers them) and
// the ids of HTML anchors.
func (p *page) anchors() map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		h, ok := n.(*ast.Heading)
		if !entering || !ok {
			return ast.WalkContinue, nil
		}
		s := slug(inlineText(h, p.src, true))
		if k := seen[s]; k > 0 {
			set[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			set[s] = true
		}
		seen[s]++
		return ast.WalkSkipChildren, nil
	})
	for _, m := range htmlAnchor.FindAllSubmatch(p.src, -1) {
		set[string(m[1])] = true
	}
	return set
}

// slug is GitHub's anchor of a heading whose text is s (github-slugger):
// lower case; every character but letters, marks, digits, connector
// punctuation (_), hyphens and spaces dropped; each space a hyphen.
func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(s)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.In(r, unicode.L, unicode.M, unicode.Nd, unicode.Nl, unicode.No, unicode.Pc):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// generated reports whether p says in its first line that a program wrote
// it (Go's "Code generated … DO NOT EDIT." convention, in an HTML comment).
func (p *page) generated() bool {
	first, _, _ := bytes.Cut(p.src, []byte("\n"))
	return bytes.Contains(first, []byte("Code generated")) && bytes.Contains(first, []byte("DO NOT EDIT"))
}
