package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Standby makes a streaming standby of s (pg_basebackup -R), on a port of
// its own, starts it and returns it. It replicates asynchronously until s
// is made to wait for it ([Server.Synchronous]).
func (s *Server) Standby(t testing.TB) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "retrysafe-pg-standby-")
	if err != nil {
		t.Fatal(err)
	}
	sb := &Server{t: t, bin: s.bin, dir: dir, as: s.as}
	t.Cleanup(func() { sb.Stop(); os.RemoveAll(dir) })
	if s.as != "" {
		os.Chmod(dir, 0o755)
		if err := os.Chown(dir, uidOf(t, s.as), gidOf(t, s.as)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sb.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	sb.run("pg_basebackup", "-h", "127.0.0.1", "-p", fmt.Sprint(s.port), "-U", "retrysafe", "-D", sb.data(), "-R", "-X", "stream")
	sb.Start()
	return sb
}

// Exec runs statements on the server as its administrator.
func (s *Server) Exec(t testing.TB, sql ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range sql {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// Synchronous makes the server's commits wait for a standby
// (synchronous_standby_names = '*'), or stop waiting.
func (s *Server) Synchronous(t testing.TB, on bool) {
	t.Helper()
	names := "''"
	if on {
		names = "'*'"
	}
	s.Exec(t, "ALTER SYSTEM SET synchronous_standby_names = "+names, "SELECT pg_reload_conf()")
	// The setting reaches every backend at its next command.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got string
		conn, err := pgx.Connect(context.Background(), s.URL())
		if err == nil {
			err = conn.QueryRow(context.Background(), "SHOW synchronous_standby_names").Scan(&got)
			conn.Close(context.Background())
		}
		if err == nil && (got != "") == on {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("synchronous_standby_names is %q after a reload: %v", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PauseSender stops the primary's WAL sender (SIGSTOP), as a busy or
// distant standby lags: the primary's commits stop reaching its standby,
// and no WAL the standby has not received is left in flight. It returns a
// function that resumes it.
func (s *Server) PauseSender(t testing.TB) (resume func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pid int
	for {
		conn, err := pgx.Connect(ctx, s.URL())
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT pid FROM pg_stat_replication WHERE state = 'streaming'").Scan(&pid)
			conn.Close(ctx)
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the primary's WAL sender does not stream: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return func() { syscall.Kill(pid, syscall.SIGCONT) }
}

// Kill kills the server and every process of it at once (SIGKILL), as a
// machine that dies does: nothing is flushed, nothing shut down.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	pidFile := filepath.Join(s.data(), "postmaster.pid")
	var pid int
	f, err := os.Open(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fscan(f, &pid)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Every process of the server at once: its children each run in a
	// session of their own, and would go on (a stopped one forever) after
	// the postmaster alone died.
	procs := append(childrenOf(pid), pid)
	for _, p := range procs {
		syscall.Kill(p, syscall.SIGKILL)
	}
	for _, p := range procs {
		for syscall.Kill(p, 0) == nil && !zombie(p) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Stop would refuse a stale pid file, and Start a stale socket lock
	// naming a process that is gone (or a zombie nobody reaps).
	os.Remove(pidFile)
	locks, _ := filepath.Glob(filepath.Join(s.dir, ".s.PGSQL.*.lock"))
	for _, l := range locks {
		os.Remove(l)
	}
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	var out []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if ppid, _ := parentOf(p); ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// parentOf reads a process's parent and state from /proc/PID/stat.
func parentOf(pid int) (ppid int, state byte) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+4 > len(b) {
		return 0, 0
	}
	var st string
	fmt.Sscan(string(b[i+1:]), &st, &ppid)
	if st != "" {
		state = st[0]
	}
	return ppid, state
}

// zombie reports whether pid has exited and awaits its parent.
func zombie(pid int) bool {
	_, st := parentOf(pid)
	return st == 'Z' || st == 0
}

// Promote promotes the standby to a primary and waits until it is one.
func (s *Server) Promote(t testing.TB) {
	t.Helper()
	s.run("pg_ctl", "-D", s.data(), "-w", "-t", "60", "promote")
}

// Port is the port the server listens on.
func (s *Server) Port() int { return s.port }

// Timeline is the timeline the primary s writes on.
func (s *Server) Timeline(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var tl int64
	if err := conn.QueryRow(ctx, `SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int`).Scan(&tl); err != nil {
		t.Fatal(err)
	}
	return tl
}

func uidOf(t testing.TB, name string) int {
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := strconv.Atoi(u.Uid)
	return id
}

func gidOf(t testing.TB, name string) int {
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := strconv.Atoi(u.Gid)
	return id
}
