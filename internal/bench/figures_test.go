package main

import "testing"

// Each lone-call ratio comes with the time a call adds, which the ratio
// divides by a baseline that moves with the disk: both from the same
// measure, and the PostgreSQL ones only when PostgreSQL was measured.
func TestFiguresGiveTheTimeACallAddsBesideItsRatio(t *testing.T) {
	rep := Report{BoltSingle: PairResult{CallNs: 1_074_400, BaselineNs: 960_900}}
	rep.Ratios.BoltCallVsTwoUpdates = rep.BoltSingle.CallNs / rep.BoltSingle.BaselineNs
	byName := func(fs []Figure) map[string]Figure {
		m := map[string]Figure{}
		for _, f := range fs {
			m[f.Name] = f
		}
		return m
	}
	fs := byName(figures(rep))
	if f, ok := fs["bolt_call_added_us"]; !ok || f.Value < 113.49 || f.Value > 113.51 || f.Met != nil {
		t.Errorf("bolt_call_added_us: %+v, want 113.5 µs with no goal", f)
	}
	if _, ok := fs["pg_call_added_us"]; ok {
		t.Error("pg_call_added_us without a PostgreSQL measure")
	}
	ratio, conc := 1025.1/787.2, 3.71
	rep.Ratios.PGCallVsPair, rep.Ratios.PG64VsPair64 = &ratio, &conc
	rep.PG = &PGResult{Single: PairResult{CallNs: 1_025_100, BaselineNs: 787_200}}
	fs = byName(figures(rep))
	if f, ok := fs["pg_call_added_us"]; !ok || f.Value < 237.89 || f.Value > 237.91 {
		t.Errorf("pg_call_added_us: %+v, want 237.9 µs", f)
	}
	if f := fs["pg_call_vs_pair"]; f.Met == nil || *f.Met {
		t.Errorf("pg_call_vs_pair at %.2f: %+v, want its goal of 1.10 missed", ratio, f)
	}
}
