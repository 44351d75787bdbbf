package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// FreelistReport is the -freelist output: commits on a bbolt file with
// much free space, with bbolt's default freelist and with boltstore's.
type FreelistReport struct {
	Records     int              `json:"records"`
	FileMB      float64          `json:"file_mb"`
	FreePages   int              `json:"free_pages"`
	Configs     []FreelistConfig `json:"configs"`
	Commits     int              `json:"commits"`
	GoVersion   string           `json:"go"`
	Started     time.Time        `json:"started"`
	SyncedVsMap float64          `json:"synced_array_vs_unsynced_map"` // commit time
}

// FreelistConfig is one way of keeping the freelist.
type FreelistConfig struct {
	Name     string  `json:"name"`
	CommitUs float64 `json:"commit_us"` // mean, one record-sized write a commit
	PagesPer float64 `json:"pages_per_commit"`
	OpenMs   float64 `json:"open_ms"` // of the file as this config left it
}

// runFreelist builds a boltstore file of n records, deletes nine in ten
// of them (scattered, as expiry does), and then times commits of one
// record-sized write at a random key on three copies of it, in
// alternation: one opened with bbolt's default freelist (a sorted array,
// written with every commit), one with boltstore's (a hash map, not
// written: rebuilt at Open), one with the array not written. Then it times
// opening each copy.
func runFreelist(w io.Writer, asJSON bool, n, commits int) error {
	dir, err := os.MkdirTemp("", "retrysafe-freelist")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rep := FreelistReport{Records: n, Commits: commits, GoVersion: goVersion(), Started: time.Now().UTC()}
	base := filepath.Join(dir, "base.db")
	s, err := boltstore.Open(base, nil)
	if err != nil {
		return err
	}
	gs := &growthStore{store: s}
	if err := fillExpiring(gs, n, func(done int) { fmt.Fprintf(os.Stderr, "freelist: %d of %d records filled\n", done, n) }); err != nil {
		return err
	}
	if _, err := storekit.SweepAll(context.Background(), s, time.Now(), 5000, nil); err != nil {
		return err
	}
	s.Close()
	fi, err := os.Stat(base)
	if err != nil {
		return err
	}
	rep.FileMB = round2(float64(fi.Size()) / (1 << 20))
	configs := []struct {
		name string
		opts bolt.Options
	}{
		{"bbolt default: array, written with each commit", bolt.Options{}},
		{"boltstore: hash map, rebuilt at Open", bolt.Options{FreelistType: bolt.FreelistMapType, NoFreelistSync: true}},
		{"array, rebuilt at Open", bolt.Options{FreelistType: bolt.FreelistArrayType, NoFreelistSync: true}},
	}
	dbs := make([]*bolt.DB, len(configs))
	paths := make([]string, len(configs))
	for i, c := range configs {
		paths[i] = filepath.Join(dir, fmt.Sprintf("copy-%d.db", i))
		if err := copyFile(base, paths[i]); err != nil {
			return err
		}
		opts := c.opts
		if dbs[i], err = bolt.Open(paths[i], 0o600, &opts); err != nil {
			return err
		}
		defer dbs[i].Close()
	}
	rep.FreePages = dbs[0].Stats().FreePageN
	value := make([]byte, 420)
	took := make([]time.Duration, len(configs))
	before := make([]bolt.Stats, len(configs))
	for i, db := range dbs {
		before[i] = db.Stats()
	}
	for range commits / 10 {
		for i, db := range dbs {
			start := time.Now()
			for range 10 {
				key := make([]byte, 32)
				rand.Read(key)
				if err := db.Update(func(tx *bolt.Tx) error {
					return tx.Bucket([]byte("retrysafe/records")).Put(key, value)
				}); err != nil {
					return err
				}
			}
			took[i] += time.Since(start)
		}
	}
	for i, c := range configs {
		st := dbs[i].Stats()
		d := st.TxStats.Sub(&before[i].TxStats)
		dbs[i].Close()
		opts := c.opts
		start := time.Now()
		db, err := bolt.Open(paths[i], 0o600, &opts)
		if err != nil {
			return err
		}
		open := time.Since(start)
		db.Close()
		rep.Configs = append(rep.Configs, FreelistConfig{Name: c.name, CommitUs: us(took[i] / time.Duration(commits)),
			PagesPer: round2(float64(d.GetWrite()) / float64(commits)), OpenMs: round2(float64(open.Microseconds()) / 1000)})
	}
	rep.SyncedVsMap = round2(rep.Configs[0].CommitUs / rep.Configs[1].CommitUs)
	if asJSON {
		return jsonLine(w, rep)
	}
	fmt.Fprintf(w, "retrysafe freelist benchmark, %s, %s: %d records, nine in ten deleted; %.0f MB file, %d free pages; %d commits of one write each, in alternation\n\n",
		rep.GoVersion, rep.Started.Format(time.RFC3339), n, rep.FileMB, rep.FreePages, commits)
	fmt.Fprintln(w, "freelist | µs per commit | pages written per commit | open ms")
	for _, c := range rep.Configs {
		fmt.Fprintf(w, "%s | %.0f | %.1f | %.1f\n", c.Name, c.CommitUs, c.PagesPer, c.OpenMs)
	}
	fmt.Fprintf(w, "\nratio: synced_array_vs_unsynced_map %.2f (commit time)\n", rep.SyncedVsMap)
	return nil
}

// fillExpiring imports n records of which nine in ten have expired,
// scattered through the key space.
func fillExpiring(gs *growthStore, n int, progress func(done int)) error {
	im := gs.store.(storekit.Importer)
	now := time.Now()
	outcome := make([]byte, 180)
	recs := make([]storekit.Record, 0, 10_000)
	for i := 0; i < n; {
		recs = recs[:0]
		for ; i < n && len(recs) < cap(recs); i++ {
			d := digestOf(uint64(i))
			r := storekit.Record{Key: fmt.Sprintf("send_email/%x", d[:16]), Tool: "send_email", State: storekit.Succeeded,
				Principal: digestOf(uint64(i % 1000)), Session: digestOf(binary.BigEndian.Uint64(d[:8])), Fingerprint: d,
				Token: uint64(i + 1), Attempts: 1, Outcome: outcome, Created: now, Updated: now, Expires: now.Add(24 * time.Hour)}
			if i%10 != 0 {
				r.Expires = now.Add(-time.Minute)
			}
			recs = append(recs, r)
		}
		if err := im.Import(context.Background(), recs); err != nil {
			return err
		}
		if i%100_000 == 0 || i == n {
			progress(i)
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
