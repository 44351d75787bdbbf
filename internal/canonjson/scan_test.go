package canonjson

import (
	"strings"
	"testing"
)

func naiveScan(run []byte) (clean, ascii bool) {
	clean, ascii = true, true
	for _, c := range run {
		if c < 0x20 || c == '\\' {
			return false, false
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	return clean, ascii
}

func FuzzScanRun(f *testing.F) {
	for _, s := range []string{"", "plain ascii text", "tab\there", `back\slash`, "caf\u00e9 au lait", "\x1f", "\x7f\x80",
		strings.Repeat("a", 15) + "\\", strings.Repeat("b", 16) + "\x00", "\x20\x5b\x5d\x5c"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, run []byte) {
		c, a := scanRun(run)
		wc, wa := naiveScan(run)
		if c != wc || (c && a != wa) {
			t.Fatalf("scanRun(%q) = %v, %v; want %v, %v", run, c, a, wc, wa)
		}
	})
}
