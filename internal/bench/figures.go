package main

import (
	"fmt"
	"io"
	"strings"
)

// Figure is one figure of a run, beside its goal.
type Figure struct {
	Name  string  `json:"name"`
	What  string  `json:"what"`
	Value float64 `json:"value"`
	// Goal is the bound the figure is held to ("≤ 1.10", "≥ 2"), or "" if
	// it has none.
	Goal string `json:"goal,omitempty"`
	// Met says whether the figure meets its goal; nil without a goal.
	Met *bool `json:"met,omitempty"`
	// Information marks a figure reported for what it says, not held to
	// its goal: its goal is a direction, and missing it fails nothing.
	Information bool `json:"information,omitempty"`
}

func atMost(name, what string, v, bound float64) Figure {
	met := v <= bound
	return Figure{Name: name, What: what, Value: v, Goal: "≤ " + trim(bound), Met: &met}
}

func atLeast(name, what string, v, bound float64) Figure {
	met := v >= bound
	return Figure{Name: name, What: what, Value: v, Goal: "≥ " + trim(bound), Met: &met}
}

func information(f Figure) Figure {
	f.Information = true
	return f
}

func trim(v float64) string { return strings.TrimSuffix(fmt.Sprintf("%.2f", v), ".00") }

// figures are the run's figures and their goals.
func figures(rep Report) []Figure {
	r, m := rep.Ratios, rep.Memory
	fs := []Figure{
		atMost("bolt_call_vs_two_updates", "boltstore, one caller: a guarded call's time against two bare bbolt Update transactions",
			r.BoltCallVsTwoUpdates, 1.15),
		// What the ratio divides: the time a call adds, which moves less
		// with the disk than the baseline it is divided by.
		{Name: "bolt_call_added_us", What: "boltstore, one caller: a guarded call's time minus two bare bbolt Update transactions', µs",
			Value: (rep.BoltSingle.CallNs - rep.BoltSingle.BaselineNs) / 1e3},
		atLeast("bolt_64_vs_batch_64", "boltstore, 64 callers: guarded calls per second against bbolt's own Batch, two per call (the floor a group commit stands on)",
			r.Bolt64VsBatch64, 0.8),
		// Against plain Update the ratio measures the disk's fsync more
		// than retrysafe: information.
		{Name: "bolt_64_vs_update_64", What: "boltstore, 64 callers: guarded calls per second against plain Update, two per call",
			Value: r.Bolt64VsUpdate64, Information: true},
	}
	if pg := rep.PG; pg != nil {
		fs = append(fs,
			atMost("pg_call_vs_pair", "pgstore, one caller: a guarded call's time against the bare INSERT … ON CONFLICT and UPDATE pair",
				*r.PGCallVsPair, 1.10),
			Figure{Name: "pg_call_added_us", What: "pgstore, one caller: a guarded call's time minus the bare pair's, µs",
				Value: (pg.Single.CallNs - pg.Single.BaselineNs) / 1e3},
			atLeast("pg_64_vs_pair_64", fmt.Sprintf("pgstore, 64 callers: guarded calls per second against the bare pair's, on one pool of %d connections", pg.PoolConns),
				*r.PG64VsPair64, 2))
		if c := pg.at(64); c != nil && c.Grouped > 0 {
			fs = append(fs, atLeast("pg_64_vs_grouped_pair_64", "pgstore, 64 callers: guarded calls per second against the bare pair group-committed by hand (the floor)",
				c.Guarded/c.Grouped, 0.8))
		}
		if c := pg.at(64); c != nil && c.Grouped > 0 && c.GroupedOnStoreTable > 0 {
			fs = append(fs,
				Figure{Name: "pg_64_grouped_on_store_table_vs_grouped", What: "pgstore, 64 callers: the floor on a copy of the store's table (its indexes) against the floor, calls per second: what the indexes' upkeep takes",
					Value: c.GroupedOnStoreTable / c.Grouped, Information: true},
				Figure{Name: "pg_64_vs_grouped_on_store_table_64", What: "pgstore, 64 callers: guarded calls per second against the floor on a copy of the store's table: what the store decides and the engine around it take",
					Value: c.Guarded / c.GroupedOnStoreTable, Information: true})
			if c.StoreAlone > 0 {
				fs = append(fs,
					Figure{Name: "pg_64_store_alone_vs_grouped_on_store_table_64", What: "pgstore, 64 callers: the store's own Claim and Finish, no tool around them, against the floor on a copy of its table: what its statements and decisions take",
						Value: c.StoreAlone / c.GroupedOnStoreTable, Information: true},
					Figure{Name: "pg_64_engine_cpu_us", What: "pgstore, 64 callers: this process's CPU a guarded call takes beyond the store's own calls, µs (the engine, on the cores PostgreSQL shares)",
						Value: c.ClientCPU.Guarded - c.ClientCPU.StoreAlone, Information: true})
			}
		}
		if c := pg.at(64); c != nil {
			fs = append(fs, Figure{Name: "pg_64_vs_wide_pair_64",
				What:  fmt.Sprintf("pgstore, 64 callers: guarded calls per second against the bare pair's on a pool of %d connections", pg.WidePoolConns),
				Value: c.Guarded / c.BareWide})
		}
	}
	return append(fs,
		information(atMost("mem_overhead_ns", "in memory: a guarded call on memstore minus a bare call, ns", r.MemOverheadNs, 8000)),
		atMost("mem_guarded_allocs", "in memory: allocations of a guarded call on memstore, the tool's own included", m.GuardedAllocs, 47),
	)
}

// at returns the result at c callers, or nil.
func (pg *PGResult) at(c int) *PGConcResult {
	for i := range pg.Concurrency {
		if pg.Concurrency[i].Callers == c {
			return &pg.Concurrency[i]
		}
	}
	return nil
}

// printFigures writes the figures beside their goals.
func printFigures(w io.Writer, fs []Figure) {
	fmt.Fprintln(w, "figure | value | goal | met | what")
	for _, f := range fs {
		met := ""
		if f.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*f.Met]
		}
		if f.Information {
			met += " (information)"
		}
		v := fmt.Sprintf("%.2f", f.Value)
		if f.Value >= 100 {
			v = fmt.Sprintf("%.0f", f.Value)
		}
		fmt.Fprintf(w, "%s | %s | %s | %s | %s\n", f.Name, v, f.Goal, strings.TrimSpace(met), f.What)
	}
}
