package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Bouncer is a PgBouncer in transaction mode in front of a server, on
// 127.0.0.1, as applications run behind a pooler: each transaction of a
// client may go to another server connection, and nothing set on a
// session survives it.
type Bouncer struct {
	t    testing.TB
	dir  string
	port int
	as   string
	cmd  *exec.Cmd
}

// StartBouncer starts PgBouncer in front of target. It needs the pgbouncer
// program (Debian's pgbouncer package, which bash .ci/run installs): a
// test without it skips, saying so.
func StartBouncer(t testing.TB, target *Server) *Bouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, err = os.Stat("/usr/sbin/pgbouncer"); err != nil {
			t.Skip("SKIPPING: pgbouncer is not installed (apt-get install pgbouncer; bash .ci/run installs it)")
		}
		bin = "/usr/sbin/pgbouncer"
	}
	dir, err := os.MkdirTemp("", "retrysafe-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	b := &Bouncer{t: t, dir: dir, as: target.as}
	if b.as != "" { // PgBouncer refuses to run as root
		os.Chmod(dir, 0o755)
		if err := os.Chown(dir, uidOf(t, b.as), gidOf(t, b.as)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	b.point(target)
	args := []string{bin, b.ini()}
	if b.as != "" {
		args = append([]string{"runuser", "-u", b.as, "--"}, args...)
	}
	b.cmd = exec.Command(args[0], args[1:]...)
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
		b.cmd.Wait()
		os.RemoveAll(dir)
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", b.port))
		if err == nil {
			c.Close()
			return b
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer did not start: %v\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *Bouncer) ini() string { return filepath.Join(b.dir, "pgbouncer.ini") }

// point writes the configuration that sends every client to target.
func (b *Bouncer) point(target *Server) {
	b.t.Helper()
	conf := fmt.Sprintf(`[databases]
postgres = host=127.0.0.1 port=%d dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
server_check_delay = 0
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, target.port, b.port, filepath.Join(b.dir, "users.txt"), filepath.Join(b.dir, "pgbouncer.log"), filepath.Join(b.dir, "pgbouncer.pid"))
	users := `"retrysafe" ""` + "\n"
	for name, text := range map[string]string{b.ini(): conf, filepath.Join(b.dir, "users.txt"): users} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
}

// Retarget sends the clients' next transactions to target, as an
// operator repoints a pooler at a promoted standby (a reload: SIGHUP).
func (b *Bouncer) Retarget(target *Server) {
	b.t.Helper()
	b.point(target)
	data, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.pid"))
	if err != nil {
		b.t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(data), &pid); err != nil {
		b.t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		b.t.Fatal(err)
	}
}

// URL is the pooler's connection string. pgx's statement cache is off
// (default_query_exec_mode=exec), as behind any pooler in transaction mode.
func (b *Bouncer) URL() string {
	return fmt.Sprintf("postgres://retrysafe@127.0.0.1:%d/postgres?sslmode=disable&default_query_exec_mode=exec", b.port)
}
