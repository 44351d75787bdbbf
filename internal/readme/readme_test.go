package readme_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// imports are the packages README snippets may use, each with a name used
// once so that an unused one is no error.
var imports = map[string]string{
	"bytes":                             "bytes.NewReader",
	"context":                           "context.Background",
	"encoding/json":                     "json.Marshal",
	"net/http":                          "http.NewRequest",
	"os":                                "os.Exit",
	"strconv":                           "strconv.Itoa",
	"testing":                           "testing.Short",
	"time":                              "time.Now",
	"github.com/tmc/langchaingo/agents": "agents.NewExecutor",
	"github.com/tmc/langchaingo/chains": "chains.Run",
	"github.com/tmc/langchaingo/llms":   "llms.TextParts",
	"github.com/tmc/langchaingo/tools":  "tools.Calculator{}",
	"github.com/modelcontextprotocol/go-sdk/mcp":         "mcp.NewServer",
	"github.com/modelcontextprotocol/go-sdk/auth":        "auth.RequireBearerToken",
	"github.com/retrysafe/retrysafe/agenttool":           "agenttool.New[struct{}, string]",
	"github.com/retrysafe/retrysafe/agenttool/boltstore": "boltstore.Open",
	"io": "io.EOF",
	"github.com/retrysafe/retrysafe/agenttool/console":                 "console.New",
	"github.com/retrysafe/retrysafe/agenttool/httpsend":                "httpsend.Check",
	"github.com/retrysafe/retrysafe/agenttool/pgstore":                 "pgstore.Open",
	"github.com/retrysafe/retrysafe/agenttool/langchain":               "langchain.WithToolSchemas",
	"github.com/retrysafe/retrysafe/agenttool/mcptool":                 "mcptool.Register",
	"github.com/retrysafe/retrysafe/agenttool/opcmd":                   "opcmd.Run",
	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest": "langchaintest.New",
	"github.com/retrysafe/retrysafe/envelope":                          "envelope.Parse",
	"github.com/retrysafe/retrysafe/agenttool/observe":                 "observe.Join",
	"github.com/retrysafe/retrysafe/agenttool/otelhooks":               "otelhooks.New",
	"log/slog": "slog.Default",
	"github.com/cloudwego/eino/components/model":             "model.ToolCallingChatModel(nil)",
	"github.com/cloudwego/eino/flow/agent/react":             "react.NewAgent",
	"github.com/cloudwego/eino/schema":                       "schema.UserMessage",
	"github.com/openai/openai-go/v3":                         "openai.NewClient",
	"github.com/anthropics/anthropic-sdk-go/v2":              "anthropic.NewClient",
	"github.com/mark3labs/mcp-go/server":                     "server.NewMCPServer",
	"github.com/retrysafe/retrysafe/agenttool/einotool":      "einotool.ToolsConfig",
	"github.com/retrysafe/retrysafe/agenttool/openaitool":    "openaitool.New",
	"github.com/retrysafe/retrysafe/agenttool/anthropictool": "anthropictool.New",
	"github.com/retrysafe/retrysafe/agenttool/mcpgo":         "mcpgo.Register",
	"github.com/dbos-inc/dbos-transact-golang/dbos":          "dbos.Launch",
	"github.com/retrysafe/retrysafe/agenttool/dbostool":      "dbostool.New",
	"github.com/retrysafe/retrysafe/agenttool/temporaltool":  "temporaltool.Register",
	"go.temporal.io/sdk/workflow":                            "workflow.GetInfo",
	"go.temporal.io/sdk/worker":                              "worker.New",
	"github.com/retrysafe/retrysafe/reconcile":               "reconcile.Poll",
}

var (
	block    = regexp.MustCompile("(?s)((?:<!-- (?:vars|decls): [^>]*-->\\s*\\n)*)```go\\n(.*?)\\n```")
	comment  = regexp.MustCompile(`<!-- (vars|decls): ([^>]*)-->`)
	declared = regexp.MustCompile(`^(\w+(?:, \w+)*) :=`)
	varNames = regexp.MustCompile(`^\w+(?:, \w+)*`)
)

// pages are the Markdown files whose Go blocks are compiled, relative to
// the repository's root: README.md and every page of docs/.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("found no page in docs/; the README links to them")
	}
	out := []string{"README.md"}
	for _, d := range docs {
		out = append(out, "docs/"+filepath.Base(d))
	}
	return out
}

// TestReadmeGoCompiles builds every Go block of README.md and of the pages
// in docs/, together, as one package: a block may use what another
// declares (the Quickstart's sendEmail, say).
func TestReadmeGoCompiles(t *testing.T) {
	var src strings.Builder
	src.WriteString("package readme\n\nimport (\n")
	for _, path := range slices.Sorted(maps.Keys(imports)) {
		fmt.Fprintf(&src, "\t%q\n", path)
	}
	src.WriteString(")\n\n")
	for _, path := range slices.Sorted(maps.Keys(imports)) {
		fmt.Fprintf(&src, "var _ = %s\n", imports[path])
	}
	n := 0
	for _, page := range pages(t) {
		text, err := os.ReadFile("../../" + page)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range block.FindAllSubmatch(text, -1) {
			n++
			writeSnippet(&src, fmt.Sprintf("%s, Go block %d", page, i+1), n, m)
		}
	}
	if n < 5 {
		t.Fatalf("found %d Go blocks in README.md and docs/*.md; the pattern is broken", n)
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	gen := filepath.Join(t.TempDir(), "snippets.go")
	if err := os.WriteFile(gen, []byte(src.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(dir, "snippets_gen.go"): gen}})
	ov := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "vet", "-overlay="+ov, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("the Go of README.md and docs/*.md does not compile:\n%s\n--- the Go built from them ---\n%s", out, numbered(src.String()))
	}
}

// writeSnippet adds one Go block (m: its comments and its code) to src as
// the body of func snippetN, with its top-level declarations before it.
func writeSnippet(src *strings.Builder, where string, n int, m [][]byte) {
	var vars []string
	for _, c := range comment.FindAllStringSubmatch(string(m[1]), -1) {
		if c[1] == "decls" {
			src.WriteString(strings.TrimSpace(c[2]) + "\n")
			continue
		}
		for _, v := range strings.Split(c[2], ";") {
			if v = strings.TrimSpace(v); v != "" {
				vars = append(vars, v)
			}
		}
	}
	top, body := split(string(m[2]))
	fmt.Fprintf(src, "\n// %s\n", where)
	src.WriteString(top)
	fmt.Fprintf(src, "\nfunc snippet%d() {\n", n)
	for _, v := range vars {
		fmt.Fprintf(src, "\tvar %s\n", v)
		for _, name := range strings.Split(varNames.FindString(v), ",") { // "a, b *T" declares a and b
			fmt.Fprintf(src, "\t_ = %s\n", strings.TrimSpace(name))
		}
	}
	src.WriteString(body)
	src.WriteString("}\n")
}

// split separates a snippet's top-level declarations (types, funcs, and
// variables declared on one line at the left margin) from its
// statements, drops its import block, and turns the elisions ("...", "…")
// into code; variables a statement declares are used once, so that the
// snippet need not use them.
func split(snippet string) (top, body string) {
	var tb, bb strings.Builder
	var used []string
	lines := strings.Split(snippet, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "import ("):
			for i < len(lines) && lines[i] != ")" {
				i++
			}
			continue
		case strings.HasPrefix(line, "var ") && !strings.HasSuffix(line, "("):
			tb.WriteString(elide(line) + "\n")
			continue
		case strings.HasPrefix(line, "type ") || strings.HasPrefix(line, "func "):
			for ; i < len(lines); i++ {
				tb.WriteString(elide(lines[i]) + "\n")
				if lines[i] == "}" || (strings.HasSuffix(lines[i], "}") && !strings.HasSuffix(lines[i], "{") && i == 0) {
					break
				}
			}
			continue
		}
		bb.WriteString("\t" + elide(line) + "\n")
		if m := declared.FindStringSubmatch(line); m != nil { // a top-level statement only
			for _, v := range strings.Split(m[1], ", ") {
				if v != "_" && !slices.Contains(used, v) {
					used = append(used, v)
				}
			}
		}
	}
	for _, v := range used {
		bb.WriteString("\t_ = " + v + "\n")
	}
	return tb.String(), bb.String()
}

func elide(line string) string {
	line = strings.ReplaceAll(line, "{ ... }", `{ panic("elided") }`)
	line = strings.ReplaceAll(line, "{ … }", `{ panic("elided") }`)
	if strings.TrimSpace(line) == "..." {
		return `panic("elided")`
	}
	return line
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}
