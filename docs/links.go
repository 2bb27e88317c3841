package docs

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/yuin/goldmark/ast"
)

// scheme matches a link target that is not relative: it names a scheme
// (https:, mailto:) or a host (//host/…).
var scheme = regexp.MustCompile(`^(?:[A-Za-z][A-Za-z0-9+.-]*:|//)`)

// lineAnchor is a GitHub anchor to a line or a range of lines of a file.
var lineAnchor = regexp.MustCompile(`^L(\d+)(?:-L(\d+))?$`)

// CheckLinks reports every relative link or image in pages (relative to
// root) whose file is missing or whose anchor is not in its target: a
// heading or HTML anchor of a Markdown page, a line (#L12, #L12-L20) of any
// other file.
func CheckLinks(root string, pages []string) []Problem {
	var out []Problem
	parsed := map[string]*page{}
	load := func(rel string) (*page, error) {
		if p, ok := parsed[rel]; ok {
			return p, nil
		}
		p, err := readPage(root, rel)
		parsed[rel] = p
		return p, err
	}
	for _, rel := range pages {
		p, err := load(rel)
		if err != nil {
			out = append(out, Problem{rel, 1, err.Error()})
			continue
		}
		_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
			var dest []byte
			switch n := n.(type) {
			case *ast.Link:
				dest = n.Destination
			case *ast.Image:
				dest = n.Destination
			}
			if !entering || dest == nil {
				return ast.WalkContinue, nil
			}
			if msg := checkLink(root, rel, string(dest), load); msg != "" {
				out = append(out, Problem{rel, p.nodeLine(n), msg})
			}
			return ast.WalkContinue, nil
		})
	}
	return out
}

// checkLink is why the link dest in page from does not resolve, "" when it
// does.
func checkLink(root, from, dest string, load func(string) (*page, error)) string {
	if scheme.MatchString(dest) {
		return ""
	}
	file, anchor, hasAnchor := strings.Cut(dest, "#")
	file, _, _ = strings.Cut(file, "?")
	if f, err := url.PathUnescape(file); err == nil {
		file = f
	}
	target := from
	if file != "" {
		target = path.Clean(path.Join(path.Dir(from), file))
	}
	if target == ".." || strings.HasPrefix(target, "../") || path.IsAbs(file) {
		return fmt.Sprintf("link %q leaves the repository", dest)
	}
	st, err := os.Stat(filepath.Join(root, filepath.FromSlash(target)))
	if err != nil {
		return fmt.Sprintf("link %q: %s does not exist", dest, target)
	}
	if !hasAnchor {
		return ""
	}
	switch {
	case st.IsDir():
		return fmt.Sprintf("link %q: anchor #%s into a directory", dest, anchor)
	case strings.HasSuffix(target, ".md"):
		p, err := load(target)
		if err != nil {
			return fmt.Sprintf("link %q: %v", dest, err)
		}
		if !p.anchors()[anchor] {
			return fmt.Sprintf("link %q: %s has no heading or anchor #%s", dest, target, anchor)
		}
		return ""
	}
	m := lineAnchor.FindStringSubmatch(anchor)
	if m == nil {
		return fmt.Sprintf("link %q: anchor #%s into a file that is not Markdown (only #L<n> or #L<n>-L<m>)", dest, anchor)
	}
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(target)))
	if err != nil {
		return fmt.Sprintf("link %q: %v", dest, err)
	}
	lines := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		lines++
	}
	for _, s := range m[1:] {
		if n, _ := strconv.Atoi(s); s != "" && (n < 1 || n > lines) {
			return fmt.Sprintf("link %q: %s has %d lines", dest, target, lines)
		}
	}
	return ""
}
