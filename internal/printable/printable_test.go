package printable

import (
	"encoding/json"
	"testing"
)

// Every character that changes what a person sees is shown as an escape;
// everything else passes unchanged.
func TestHiddenCharactersAreShown(t *testing.T) {
	tests := []struct{ in, text, line string }{
		{"plain text, ascii", "plain text, ascii", "plain text, ascii"},
		{"Ana Lima — São Paulo, 東京 😀", "Ana Lima — São Paulo, 東京 😀", "Ana Lima — São Paulo, 東京 😀"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab", "two lines and a tab"},
		{"\x1b[2J\x1b]0;pwned\x07", `\u001b[2J\u001b]0;pwned\u0007`, `\u001b[2J\u001b]0;pwned\u0007`},
		{"over\rwrite", `over\u000dwrite`, `over\u000dwrite`},
		{"del\x7f", `del\u007f`, `del\u007f`},
		{"csi\u009b31m osc\u009d0;t\u009c", `csi\u009b31m osc\u009d0;t\u009c`, `csi\u009b31m osc\u009d0;t\u009c`},
		{"abc\u202edcba\u202c", `abc\u202edcba\u202c`, `abc\u202edcba\u202c`},
		{"\u2066iso\u2069 \u200emark\u200f \u061c", `\u2066iso\u2069 \u200emark\u200f \u061c`, `\u2066iso\u2069 \u200emark\u200f \u061c`},
		{"sep\u2028par\u2029", `sep\u2028par\u2029`, `sep\u2028par\u2029`},
		{"lone \x9b byte", `lone \x9b byte`, `lone \x9b byte`},
		{"é\u00a0nbsp", "é\u00a0nbsp", "é\u00a0nbsp"},    // U+00A0 starts with 0xC2 and is printable
		{"—\u2014 dash", "—\u2014 dash", "—\u2014 dash"}, // U+2014 starts with 0xE2
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.text {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.text)
		}
		if got := Line(tt.in); got != tt.line {
			t.Errorf("Line(%q) = %q, want %q", tt.in, got, tt.line)
		}
	}
}

// A line of encoded JSON, filtered, is JSON of the same value.
func TestFilteredJSONKeepsItsMeaning(t *testing.T) {
	want := map[string]string{"error": "boom\u009b31m\u202eevil\u2028", "ok": "São"}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	filtered := Line(string(b))
	var got map[string]string
	if err := json.Unmarshal([]byte(filtered), &got); err != nil || got["error"] != want["error"] || got["ok"] != want["ok"] {
		t.Errorf("filtered %s decodes to %q, %v; want %q", filtered, got, err, want)
	}
}

// Clean text costs no allocation.
func TestCleanTextIsNotCopied(t *testing.T) {
	s := "send_email/ekqoooiqn2fzgdexgncpaydqyhtisk2s — São Paulo"
	if n := testing.AllocsPerRun(100, func() { _ = Line(s) }); n != 0 {
		t.Errorf("Line of clean text: %v allocations, want 0", n)
	}
}
