package readme_test

import (
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// link matches an inline Markdown link or image: [text](target) or
	// [text](target "title").
	link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpan is inline code, where brackets are not links.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	// scheme starts an absolute address (https:, mailto:), not checked here.
	scheme  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// inlineLink keeps a link's text in a heading: [text](target) reads text.
	inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// TestLinksResolve checks every relative link and #anchor of README.md and
// docs/*.md: the file it names exists, and the anchor is the slug of one of
// that file's headings, as GitHub makes them. It also checks that the
// README links to every page of docs/, so that no page is out of reach.
func TestLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{} // page → its anchors
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		text, err := os.ReadFile("../../" + page)
		if err != nil {
			t.Fatal(err)
		}
		anchors[page] = headingAnchors(string(text))
		return anchors[page]
	}
	linked := map[string]bool{}
	for _, page := range pages(t) {
		text, err := os.ReadFile("../../" + page)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range prose(string(text)) {
			for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := page
				if file != "" {
					dest = path.Clean(path.Join(path.Dir(page), file))
					if strings.HasPrefix(dest, "../") {
						t.Errorf("%s:%d: %s leaves the repository", page, n+1, target)
						continue
					}
					if _, err := os.Stat("../../" + dest); err != nil {
						t.Errorf("%s:%d: %s: no file %s", page, n+1, target, dest)
						continue
					}
				}
				if page == "README.md" {
					linked[dest] = true
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: %s: an anchor into %s, which is not a Markdown page", page, n+1, target, dest)
					continue
				}
				if !anchorsOf(dest)[anchor] {
					t.Errorf("%s:%d: %s: %s has no heading with the anchor #%s", page, n+1, target, dest, anchor)
				}
			}
		}
	}
	for _, page := range pages(t) {
		if page != "README.md" && !linked[page] {
			t.Errorf("README.md does not link to %s", page)
		}
	}
}

// prose returns the lines of a Markdown text with those of fenced code
// blocks blanked, so that line numbers stay true.
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the headings of a page:
// the text lower-cased, without punctuation, spaces as hyphens, and -1,
// -2 … after a repeated one.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(inlineLink.ReplaceAllString(m[1], "$1"))
		if k := seen[s]; k > 0 {
			out[s+"-"+strconv.Itoa(k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestHeadingAnchors holds the anchors to GitHub's: the cases the pages use.
func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# Writing a tool\n## A tool's error text reaches the model\n" +
		"## Start here: `examples/starter`\n```sh\n# not a heading\n```\n## bbolt: `agenttool/boltstore`\n" +
		"## Stores\n## Stores\n## The promises I1–I9\n")
	for _, want := range []string{"writing-a-tool", "a-tools-error-text-reaches-the-model",
		"start-here-examplesstarter", "bbolt-agenttoolboltstore", "stores", "stores-1", "the-promises-i1i9"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block was taken for a heading")
	}
}
