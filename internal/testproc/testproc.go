// Package testproc starts the running test binary again as a helper process,
// so that a test can kill a real process (SIGKILL) at a point it chooses and
// look at what survived.
package testproc

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// Lifetime bounds every helper process: it is killed after this, whatever
// the test does.
const Lifetime = 2 * time.Minute

// Proc is a running helper process.
type Proc struct {
	Cmd    *exec.Cmd
	Lines  *bufio.Scanner // its standard output, line by line
	Stderr *bytes.Buffer  // its standard error, for failure messages

	waitOnce sync.Once
	waitErr  error
}

// Start runs the test named test (the whole name, anchored) in a new process
// of this test binary, with env added to the environment. The process is
// killed when the test ends, or after Lifetime.
func Start(t testing.TB, test string, env ...string) *Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	p := &Proc{Cmd: cmd, Stderr: &bytes.Buffer{}}
	cmd.Stderr = p.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.Lines = bufio.NewScanner(out)
	stop := time.AfterFunc(Lifetime, func() { cmd.Process.Kill() })
	t.Cleanup(func() { stop.Stop(); p.Kill() })
	return p
}

// Kill sends SIGKILL (no deferred code runs in the process) and waits for
// the process to end.
func (p *Proc) Kill() {
	p.Cmd.Process.Kill()
	p.Wait()
}

// Wait waits for the process to end and returns how it ended.
func (p *Proc) Wait() error {
	p.waitOnce.Do(func() { p.waitErr = p.Cmd.Wait() })
	return p.waitErr
}

// Until reads lines until one satisfies match, and reports whether one did
// before the output ended.
func (p *Proc) Until(match func(line string) bool) bool {
	for p.Lines.Scan() {
		if match(p.Lines.Text()) {
			return true
		}
	}
	return false
}
