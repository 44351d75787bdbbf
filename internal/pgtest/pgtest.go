// Package pgtest gives tests a PostgreSQL to work against: the shared one
// named by DATABASE_URL, with a private schema per test, or a private server
// that a test may stop and start (to play an outage).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
)

// URL returns DATABASE_URL, or skips the test with a loud line when it is
// unset. CI always sets it (.ci/run starts a server).
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		t.Skip("SKIPPING PostgreSQL test: DATABASE_URL is not set and no private server started (PostgreSQL's server binaries not found: install postgresql, or set RETRYSAFE_PG_BIN or DATABASE_URL)")
	}
	return url
}

// Schema returns a fresh schema name and drops the schema when the test ends.
func Schema(t testing.TB, url string) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return // the server may be down on purpose
		}
		defer conn.Close(ctx)
		conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	return name
}

// Role creates a login role with a random name and password, runs grants as
// the administrator of url (each statement with {role} replaced by the
// role's quoted name), and returns url with the role as its user. The role
// and its rights are dropped when the test ends, after what the test
// cleans up later than this call. Roles belong to the whole server: each
// test makes its own.
func Role(t testing.TB, url string, grants ...string) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := "r_" + hex.EncodeToString(b)
	password := hex.EncodeToString(b) + "-pw"
	quoted := pgx.Identifier{name}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE ROLE "+quoted+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return // the server may be down on purpose
		}
		defer conn.Close(ctx)
		conn.Exec(ctx, "DROP OWNED BY "+quoted)
		conn.Exec(ctx, "DROP ROLE "+quoted)
	})
	for _, g := range grants {
		if _, err := conn.Exec(ctx, strings.ReplaceAll(g, "{role}", quoted)); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.UserPassword(name, password)
	return u.String()
}

// Open opens a pgstore on DATABASE_URL in a fresh schema, closed and dropped
// when the test ends.
func Open(t testing.TB) *pgstore.Store {
	t.Helper()
	url := URL(t)
	s, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: Schema(t, url)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Server is a private PostgreSQL server on 127.0.0.1, in a temporary
// directory, removed when the test ends.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	as   string // the user to run as, when running as root
}

// StartServer initialises and starts a private server. It needs the server
// binaries (RETRYSAFE_PG_BIN, or Debian's /usr/lib/postgresql/N/bin).
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv("RETRYSAFE_PG_BIN")
	if bin == "" {
		dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
		if len(dirs) > 0 {
			bin = dirs[len(dirs)-1]
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); bin == "" || err != nil {
		t.Fatal("PostgreSQL server binaries not found: install Debian's postgresql package (bash .ci/run does) or set RETRYSAFE_PG_BIN")
	}
	dir, err := os.MkdirTemp("", "retrysafe-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: dir}
	t.Cleanup(func() { s.Stop(); os.RemoveAll(dir) })
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal("running as root needs a postgres user to run the server as: ", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		os.Chmod(dir, 0o755)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		s.as = "postgres"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	s.run("initdb", "-D", s.data(), "-A", "trust", "-U", "retrysafe", "-E", "UTF8", "--no-sync")
	s.Start()
	return s
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// URL is the server's connection string.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://retrysafe@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Start starts the (stopped) server and waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off", s.port, s.dir)
	s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "server.log"), "-o", opts, "-w", "-t", "60", "start")
}

// Stop stops the server at once, as a crash would (immediate mode).
func (s *Server) Stop() {
	if _, err := os.Stat(filepath.Join(s.data(), "postmaster.pid")); err != nil {
		return
	}
	s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
}

func (s *Server) run(name string, args ...string) {
	s.t.Helper()
	cmdline := append([]string{filepath.Join(s.bin, name)}, args...)
	if s.as != "" {
		cmdline = append([]string{"runuser", "-u", s.as, "--"}, cmdline...)
	}
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		s.t.Fatalf("%s: %v\n%s\n%s", strings.Join(cmdline, " "), err, out, log)
	}
}
