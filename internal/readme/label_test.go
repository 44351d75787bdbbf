package readme

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The operator can tell whose action a record is only if the calls were
// labelled: the README's Quickstart, docs/agent-loops.md and every example
// set a label (agenttool.WithLabel, or a demo.Example's Label), as an
// application should.
func TestEveryExampleLabelsItsActions(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{"README.md", filepath.Join("docs", "agent-loops.md")}
	mains, err := filepath.Glob(filepath.Join(root, "examples", "*", "main.go"))
	if err != nil || len(mains) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, m := range mains {
		rel, _ := filepath.Rel(root, m)
		files = append(files, rel)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.Contains(s, "agenttool.WithLabel(") && !strings.Contains(s, "\tLabel:") {
			t.Errorf("%s sets no label: an operator reading its records could not tell whose action each is", f)
		}
	}
}
