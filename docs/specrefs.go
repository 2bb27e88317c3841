package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// SpecPage is the specification, relative to the repository's root.
const SpecPage = "docs/spec.md"

var (
	// a reference: docs/spec.md §5, docs/spec.md §5.3
	specRef = regexp.MustCompile(`docs/spec\.md §(\d+)(?:\.(\d+))?`)
	// a section of the specification: "## 5. Invariants"
	specSection = regexp.MustCompile(`^## (\d+)\. `)
	// a numbered item of a section: "3. MySQL: ..."
	specItem = regexp.MustCompile(`^(\d+)\. `)
)

// specRefExts are the files read for references.
var specRefExts = map[string]bool{".go": true, ".md": true, ".js": true, ".vue": true, ".yaml": true, ".yml": true, ".sql": true, ".lua": true, ".sh": true}

// SpecSections returns the sections of the specification at path: for each
// "## n. Title" the numbers of its numbered items (§n.m is the m-th).
func SpecSections(path string) (map[int]map[int]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sections := map[int]map[int]bool{}
	current := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := specSection.FindStringSubmatch(line); m != nil {
			current, _ = strconv.Atoi(m[1])
			sections[current] = map[int]bool{}
			continue
		}
		if strings.HasPrefix(line, "#") {
			current = 0
			continue
		}
		if m := specItem.FindStringSubmatch(line); m != nil && current != 0 {
			n, _ := strconv.Atoi(m[1])
			sections[current][n] = true
		}
	}
	return sections, sc.Err()
}

// CheckSpecRefs reports every "docs/spec.md §n" or "§n.m" in the source and
// documentation files under root (not testdata, node_modules, dot
// directories) whose section n, or item m of it, is not in the
// specification.
func CheckSpecRefs(root string) ([]Problem, error) {
	sections, err := SpecSections(filepath.Join(root, SpecPage))
	if err != nil {
		return nil, err
	}
	var out []Problem
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if !specRefExts[filepath.Ext(name)] {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range specRef.FindAllStringSubmatch(line, -1) {
				n, _ := strconv.Atoi(m[1])
				items, ok := sections[n]
				switch {
				case !ok:
					out = append(out, Problem{rel, i + 1, fmt.Sprintf("%s has no section §%d", SpecPage, n)})
				case m[2] != "":
					if k, _ := strconv.Atoi(m[2]); !items[k] {
						out = append(out, Problem{rel, i + 1, fmt.Sprintf("%s §%d has no item %d", SpecPage, n, k)})
					}
				}
			}
		}
		return nil
	})
	return out, err
}
