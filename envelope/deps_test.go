package envelope_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsStandardLibraryOnly keeps the vocabulary light: a user who
// imports envelope pulls in nothing but the standard library.
func TestImportsStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/retrysafe/retrysafe/envelope" {
			t.Errorf("envelope depends on %s", p)
		}
	}
}
