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

func TestInputTooLarge(t *testing.T) {
	defer func(m int) { maxInput = m }(maxInput)
	maxInput = 16
	in := []byte(`{"subject":"a long one"}`)
	if _, err := Canonical(in); err == nil || !strings.Contains(err.Error(), "larger than 16") {
		t.Errorf("Canonical of %d bytes: %v", len(in), err)
	}
	var o Object
	if err := o.Append(nil, in); err == nil || !strings.Contains(err.Error(), "larger than 16") || o.Len() != 0 {
		t.Errorf("Append of %d bytes: %v, %d members", len(in), err, o.Len())
	}
	if err := o.Append(nil, []byte(`{"a":1}`)); err != nil || o.Len() != 1 {
		t.Errorf("Append within the limit: %v", err)
	}
}
