package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
)

// IndexCost is what one schema of the records table costs a lone call's
// two statements, against the bare pair's table in the same run.
type IndexCost struct {
	Schema  string   `json:"schema"`  // which indexes the table has
	PairNs  float64  `json:"pair_ns"` // the claim's INSERT and the outcome's UPDATE, one after the other
	VsBare  float64  `json:"vs_bare"`
	Indexes []string `json:"indexes,omitempty"`
}

// IndexReport is the -pgindexes benchmark's result.
type IndexReport struct {
	Started   time.Time   `json:"started"`
	GoVersion string      `json:"go"`
	Pairs     int         `json:"pairs"`
	Costs     []IndexCost `json:"costs"`
}

// runIndexes measures where a lone pgstore call's time goes in
// PostgreSQL: the store's own two statements (a claim of a new key in a
// free slot, and its outcome) against copies of the records table made
// by pgstore.Open itself — with all of its indexes, without each one in
// turn, and with the key alone — and the bare pair on a table of the key
// alone, in alternation, with no Go engine around them.
func runIndexes(ctx context.Context, w io.Writer, asJSON bool, url string, n int) error {
	b := make([]byte, 6)
	rand.Read(b)
	schema := "bench_" + hex.EncodeToString(b)
	store, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		return err
	}
	defer store.Close()
	pool := store.Pool()
	defer pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	// The records table's secondary indexes, as the migrations made them.
	rows, err := pool.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
		WHERE schemaname = $1 AND tablename = 'records' AND indexname <> 'records_pkey' ORDER BY indexname`, schema)
	if err != nil {
		return err
	}
	type index struct{ name, def string }
	var indexes []index
	for rows.Next() {
		var ix index
		if err := rows.Scan(&ix.name, &ix.def); err != nil {
			return err
		}
		indexes = append(indexes, ix)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	records := pgx.Identifier{schema, "records"}.Sanitize()
	// copyWith makes a copy of the records table with the given indexes.
	copyWith := func(name string, keep []index) error {
		t := pgx.Identifier{schema, name}.Sanitize()
		if _, err := pool.Exec(ctx, `CREATE TABLE `+t+` (LIKE `+records+` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `ALTER TABLE `+t+` ADD PRIMARY KEY (key)`); err != nil {
			return err
		}
		for _, ix := range keep {
			def := strings.Replace(ix.def, "INDEX "+ix.name+" ON "+records, "INDEX ON "+t, 1)
			def = strings.Replace(def, "INDEX "+ix.name+" ON "+schema+".records", "INDEX ON "+t, 1)
			if def == ix.def {
				return fmt.Errorf("cannot copy index %s: %s", ix.name, ix.def)
			}
			if _, err := pool.Exec(ctx, def); err != nil {
				return fmt.Errorf("copy index %s: %w", ix.name, err)
			}
		}
		return nil
	}
	type variant struct {
		IndexCost
		table string
		bare  bool
	}
	names := func(ixs []index) []string {
		var s []string
		for _, ix := range ixs {
			s = append(s, ix.name)
		}
		return s
	}
	variants := []variant{{IndexCost: IndexCost{Schema: "bare pair: the key alone, fewer columns"}, table: "bare", bare: true}}
	variants = append(variants, variant{IndexCost: IndexCost{Schema: "records, all indexes", Indexes: names(indexes)}, table: "v_all"})
	for i, ix := range indexes {
		keep := append(append([]index{}, indexes[:i]...), indexes[i+1:]...)
		variants = append(variants, variant{IndexCost: IndexCost{Schema: "records, without " + ix.name, Indexes: names(keep)}, table: "v_" + strconv.Itoa(i)})
	}
	variants = append(variants, variant{IndexCost: IndexCost{Schema: "records, the key alone"}, table: "v_key"})
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "bare"}.Sanitize()+` (key text PRIMARY KEY, tool text NOT NULL, state smallint NOT NULL,
		principal bytea NOT NULL, fingerprint bytea NOT NULL, owner text NOT NULL, token bigint NOT NULL, lease_expiry timestamptz,
		attempts integer NOT NULL, outcome bytea, created timestamptz NOT NULL, updated timestamptz NOT NULL, expires timestamptz)`); err != nil {
		return err
	}
	for _, v := range variants[1:] {
		var keep []index
		for _, ix := range indexes {
			for _, name := range v.Indexes {
				if name == ix.name {
					keep = append(keep, ix)
				}
			}
		}
		if err := copyWith(v.table, keep); err != nil {
			return err
		}
	}
	seq := pgx.Identifier{schema, "tokens"}.Sanitize()
	digest := make([]byte, 32)
	var count int
	pairs := func(pool *pgxpool.Pool, v variant) error {
		count++
		key := "send_email/" + strconv.Itoa(count) + "abcdefghijklmnopqrstuvwxyz"
		now := time.Now()
		t := pgx.Identifier{schema, v.table}.Sanitize()
		var token int64
		if v.bare {
			if err := pool.QueryRow(ctx, `INSERT INTO `+t+` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated)
				VALUES ($1, 'send_email', 1, $2, $2, 'owner', $3, $4, 0, $5, $5) ON CONFLICT (key) DO NOTHING RETURNING token`,
				key, digest, count, now.Add(time.Minute), now).Scan(&token); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, `UPDATE `+t+` SET state = 2, owner = '', lease_expiry = NULL, attempts = 1, outcome = $3,
				updated = $4, expires = $5 WHERE key = $1 AND token = $2 AND state = 1`, key, token, recordSized, now, now.Add(24*time.Hour))
			return err
		}
		// pgstore's claim of a new key and its outcome (queries.go: insert
		// and finish), with a session and fence scope; the look for records
		// beside the session's slot only where records_beside is there to
		// answer it (without it, the look would read the whole table).
		key1 := `$1`
		if slices.Contains(v.Indexes, "records_beside") {
			key1 = `CASE WHEN $9::bytea = $8::bytea AND EXISTS (SELECT FROM ` + t + ` b WHERE b.tool = $2 AND b.session = $8
				AND (b.state = 1 OR b.state = 4 OR (b.state = 2 AND b.notice_until IS NOT NULL)) AND b.fence_scope IS DISTINCT FROM b.session
				AND b.key <> $1 ORDER BY b.key LIMIT 1) THEN NULL ELSE $1 END`
		}
		if err := pool.QueryRow(ctx, `INSERT INTO `+t+` (key, tool, state, principal, fingerprint, owner, token, lease_expiry, attempts, created, updated, session, label, fence_scope)
			VALUES (`+key1+`, $2, 1, $3, $4, $5, nextval('`+seq+`'), $6, 0, $7, $7, $8, $10, $9)
			ON CONFLICT DO NOTHING RETURNING token`, key, "send_email", digest, digest, "owner", now.Add(time.Minute), now, digest, digest, "").Scan(&token); err != nil {
			return err
		}
		var none *time.Time
		_, err := pool.Exec(ctx, `UPDATE `+t+` SET state = $3, owner = '', lease_expiry = $10, taken_over = false, attempts = $4, outcome = $5, updated = $6,
			expires = $7, retry_approved = $8, resolution = COALESCE($9, resolution), notice_until = $11
			WHERE key = $1 AND token = $2 AND state = 1`, key, token, int16(2), int32(1), recordSized, now, now.Add(24*time.Hour), false, nil, none, none)
		return err
	}
	// In rounds of ten pairs each, in turn, so that the disk's moods fall
	// on all alike.
	total := make([]time.Duration, len(variants))
	for done := 0; done < n; done += 10 {
		for i, v := range variants {
			t0 := time.Now()
			for range 10 {
				if err := pairs(pool, v); err != nil {
					return fmt.Errorf("%s: %w", v.Schema, err)
				}
			}
			total[i] += time.Since(t0)
		}
	}
	rounds := float64((n + 9) / 10 * 10)
	rep := IndexReport{Started: time.Now().UTC(), GoVersion: goVersion(), Pairs: int(rounds)}
	for i, v := range variants {
		v.PairNs = float64(total[i].Nanoseconds()) / rounds
		v.VsBare = float64(total[i]) / float64(total[0])
		rep.Costs = append(rep.Costs, v.IndexCost)
	}
	out := w
	if asJSON {
		out = io.Discard
	}
	fmt.Fprintf(out, "retrysafe: where a lone pgstore call's statements go, %s, %s, %d pairs each\n\n", rep.GoVersion, rep.Started.Format(time.RFC3339), rep.Pairs)
	fmt.Fprintln(out, "table | µs per INSERT + UPDATE | vs bare pair")
	for _, c := range rep.Costs {
		fmt.Fprintf(out, "%s | %s | %s\n", c.Schema, f1(c.PairNs/1e3), f2(c.VsBare))
	}
	if asJSON {
		return jsonLine(w, rep)
	}
	return nil
}
