package gateway

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docFile is a file name in doc.go's "Files" section.
var docFile = regexp.MustCompile(`\b[a-z_]+\.go\b`)

// filesSection returns the file names doc.go's "# Files" section lists, in
// order, repeats included.
func filesSection(doc string) []string {
	_, section, ok := strings.Cut(doc, "// # Files\n")
	if !ok {
		return nil
	}
	section, _, _ = strings.Cut(section, "\npackage ")
	return docFile.FindAllString(section, -1)
}

// missingFromDoc returns the files that are not listed, and the listed names
// that are no file.
func missingFromDoc(files, listed []string) (unlisted, unknown []string) {
	for _, f := range files {
		if !slices.Contains(listed, f) {
			unlisted = append(unlisted, f)
		}
	}
	for _, l := range listed {
		if !slices.Contains(files, l) && !slices.Contains(unknown, l) {
			unknown = append(unknown, l)
		}
	}
	return unlisted, unknown
}

// TestDocListsEveryFile keeps doc.go's grouping of the files (the buyer's hot
// path, the buyer's other routes, operator only, wiring) complete: every
// non-test file of the package is in it, and it names no file that is gone.
func TestDocListsEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, p := range paths {
		if !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
	}
	listed := filesSection(string(doc))
	if len(listed) == 0 {
		t.Fatal(`doc.go has no "# Files" section`)
	}
	unlisted, unknown := missingFromDoc(files, listed)
	if len(unlisted) > 0 {
		t.Errorf("doc.go's Files section does not list %v: say whether each is on the buyer's hot path or operator only", unlisted)
	}
	if len(unknown) > 0 {
		t.Errorf("doc.go's Files section lists %v, which are no files of the package", unknown)
	}
}

// The check fails on a file left out and on a name that is no file.
func TestDocListsEveryFileFails(t *testing.T) {
	doc := "// # Files\n//   - orders.go, gone.go\npackage gateway\n"
	unlisted, unknown := missingFromDoc([]string{"orders.go", "new.go"}, filesSection(doc))
	if !slices.Equal(unlisted, []string{"new.go"}) || !slices.Equal(unknown, []string{"gone.go"}) {
		t.Fatalf("unlisted %v, unknown %v; want [new.go] and [gone.go]", unlisted, unknown)
	}
}
