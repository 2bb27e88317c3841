package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestK6ScriptsParse checks that every k6 script is valid ES module syntax
// (k6 itself is not needed: node --check parses without resolving imports).
func TestK6ScriptsParse(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}
	scripts, err := filepath.Glob("k6/*.js")
	if err != nil || len(scripts) < 6 {
		t.Fatalf("k6 scripts: %v %v", scripts, err)
	}
	for _, s := range scripts {
		src, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(node, "--input-type=module", "--check")
		cmd.Stdin = bytes.NewReader(src)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", s, err, out)
		}
	}
}
