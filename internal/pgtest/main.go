package pgtest

import (
	"context"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Main runs a test binary's tests (call it from TestMain) with a
// PostgreSQL for URL to name: DATABASE_URL if it is set; otherwise, where
// the server binaries are found (RETRYSAFE_PG_BIN, or Debian's
// /usr/lib/postgresql/N/bin), a private server it starts for the binary —
// on 127.0.0.1, a free port, a temporary directory — and stops when the
// tests end; otherwise the PostgreSQL tests skip, and say so (go test -v
// shows each SKIP). It returns the tests' exit code.
func Main(m *testing.M) int {
	if os.Getenv("DATABASE_URL") != "" {
		return m.Run()
	}
	bin := serverBin()
	if bin == "" {
		fmt.Fprintln(os.Stderr, "PostgreSQL tests will be SKIPPED: DATABASE_URL is not set and PostgreSQL's server binaries were not found (install postgresql, or set RETRYSAFE_PG_BIN or DATABASE_URL)")
		return m.Run()
	}
	url, stop, err := startPrivate(bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "PostgreSQL tests will be SKIPPED: a private server did not start: %v\n", err)
		return m.Run()
	}
	defer stop()
	os.Setenv("DATABASE_URL", url)
	defer os.Unsetenv("DATABASE_URL")
	return m.Run()
}

// serverBin returns the directory of PostgreSQL's server binaries, or "".
func serverBin() string {
	bin := os.Getenv("RETRYSAFE_PG_BIN")
	if bin == "" {
		dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
		if len(dirs) > 0 {
			bin = dirs[len(dirs)-1]
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); bin == "" || err != nil {
		return ""
	}
	return bin
}

// startPrivate initialises and starts a server in a temporary directory,
// as the postgres user when this is root, and returns its URL and a
// function that stops it and removes the directory.
func startPrivate(bin string) (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "retrysafe-pg-tests-")
	if err != nil {
		return "", nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return "", nil, fmt.Errorf("running as root needs a postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		os.Chmod(dir, 0o755)
		os.Chown(dir, uid, gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	run := func(name string, args ...string) error {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return fmt.Errorf("%s: %w\n%s\n%s", name, err, out, log)
		}
		return nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	data := filepath.Join(dir, "data")
	stop = func() {
		run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
		os.RemoveAll(dir)
	}
	if err := run("initdb", "-D", data, "-A", "trust", "-U", "retrysafe", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off -c max_connections=300", port, dir)
	if err := run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "server.log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		stop()
		return "", nil, err
	}
	url = fmt.Sprintf("postgres://retrysafe@127.0.0.1:%d/postgres?sslmode=disable", port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		stop()
		return "", nil, err
	}
	conn.Close(ctx)
	fmt.Fprintf(os.Stderr, "DATABASE_URL is not set: the PostgreSQL tests run against a private server on 127.0.0.1:%d, stopped when they end\n", port)
	return url, stop, nil
}

// Param returns url with the parameters of query ("a=1&b=2", a leading &
// allowed) set in its query string, whether or not it had one.
func Param(t testing.TB, url, query string) string {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	add, err := neturl.ParseQuery(strings.TrimPrefix(query, "&"))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for k, vs := range add {
		q[k] = vs
	}
	// A space as %20, not +: pgx does not read + as a space.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}
