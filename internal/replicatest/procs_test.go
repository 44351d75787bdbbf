package replicatest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// replicaProc is one running replica process.
type replicaProc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	ready  chan string   // its address, once it serves
	done   chan struct{} // closed once it has ended
	killed atomic.Bool   // the test killed it
	synced chan int      // the sync marks it printed
}

// lockedBuffer is a bytes.Buffer safe for a process's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// replicaSet runs the replicas: each has a name and an address that stays
// the same across restarts, as a pod behind a service keeps its place.
type replicaSet struct {
	env   []string
	names []string
	addrs []string

	mu       sync.Mutex
	procs    map[string]*replicaProc
	held     map[string]bool // paused, or about to be: the client sends it nothing new
	answered []answered      // every envelope any replica answered
	stderrs  []string        // the standard error of every process that ended
	restarts sync.WaitGroup
	restartT []time.Duration // from a kill to the restarted process serving
	failed   []error         // restarts that failed, and processes that ended unkilled
}

// launch starts n replicas with env added to their environment.
func (s *replicaSet) launch(env []string, n int) error {
	s.env, s.procs, s.held = env, map[string]*replicaProc{}, map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("replica-%d", i+1)
		p, err := s.start(name, "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.names = append(s.names, name)
		s.addrs = append(s.addrs, <-p.ready)
	}
	return nil
}

// start starts the replica name on addr and waits until it serves.
func (s *replicaSet) start(name, addr string) (*replicaProc, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestReplicaProcess$", "-test.timeout=0")
	cmd.Env = append(append(os.Environ(), s.env...), envName+"="+name, envAddr+"="+addr)
	// The replica dies with the test process, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &replicaProc{cmd: cmd, stderr: &lockedBuffer{}, ready: make(chan string, 1), done: make(chan struct{}), synced: make(chan int, 16)}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		lines := bufio.NewScanner(out)
		lines.Buffer(make([]byte, 64<<10), 1<<20)
		for lines.Scan() {
			s.read(p, lines.Text())
		}
		err := cmd.Wait()
		s.mu.Lock()
		s.stderrs = append(s.stderrs, p.stderr.String())
		if !p.killed.Load() {
			s.failed = append(s.failed, fmt.Errorf("%s ended on its own (%v): %s", name, err, p.stderr.String()))
		}
		s.mu.Unlock()
		close(p.done)
	}()
	select {
	case a := <-p.ready:
		p.ready <- a
	case <-p.done:
		return nil, fmt.Errorf("replica %s ended before it served: %s", name, p.stderr.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		return nil, fmt.Errorf("replica %s did not serve within a minute: %s", name, p.stderr.String())
	}
	s.mu.Lock()
	s.procs[name] = p
	s.mu.Unlock()
	return p, nil
}

// read takes one line a replica printed.
func (s *replicaSet) read(p *replicaProc, line string) {
	switch {
	case strings.HasPrefix(line, lineReady):
		p.ready <- strings.TrimPrefix(line, lineReady)
	case strings.HasPrefix(line, lineEnvelope):
		var a answered
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, lineEnvelope)), &a); err == nil {
			s.mu.Lock()
			s.answered = append(s.answered, a)
			s.mu.Unlock()
		}
	case strings.HasPrefix(line, lineSynced):
		var n int
		fmt.Sscan(strings.TrimPrefix(line, lineSynced), &n)
		p.synced <- n
	}
}

// proc returns the current process of a replica.
func (s *replicaSet) proc(name string) *replicaProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

// killAndRestart sends SIGKILL to a replica, waits for it to end, and
// restarts it on the same address at once (in the background).
func (s *replicaSet) killAndRestart(name string) {
	p := s.proc(name)
	if p == nil {
		return
	}
	p.killed.Store(true)
	p.cmd.Process.Kill()
	<-p.done
	killed := time.Now()
	addr := s.addrs[s.index(name)]
	s.restarts.Add(1)
	go func() {
		defer s.restarts.Done()
		_, err := s.start(name, addr)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.failed = append(s.failed, err)
			return
		}
		s.restartT = append(s.restartT, time.Since(killed))
	}()
}

func (s *replicaSet) index(name string) int {
	for i, n := range s.names {
		if n == name {
			return i
		}
	}
	panic("no replica " + name)
}

// hold marks a replica as about to pause: the client sends it nothing new
// until it is resumed, as a load balancer stops sending to a backend that
// does not answer. It reports false if another replica is held already.
func (s *replicaSet) hold(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) > 0 || s.procs[name] == nil {
		return false
	}
	s.held[name] = true
	return true
}

// isHeld reports whether the client should skip a replica.
func (s *replicaSet) isHeld(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[name]
}

// stop sends SIGSTOP to a held replica and waits until it has stopped.
func (s *replicaSet) stop(name string) error {
	p := s.proc(name)
	if p == nil {
		return errors.New("no process")
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); !stopped(p.cmd.Process.Pid); {
		if time.Now().After(deadline) {
			return errors.New(name + " did not stop")
		}
		time.Sleep(time.Millisecond) // the kernel stops it; nothing here can tell when
	}
	return nil
}

// resume sends SIGCONT to a held replica and lets the client send it calls
// again.
func (s *replicaSet) resume(name string) {
	if p := s.proc(name); p != nil {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	s.mu.Lock()
	delete(s.held, name)
	s.mu.Unlock()
}

// stopped reports whether the process pid is stopped (by a signal).
func stopped(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, so read after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && len(stat) > i+2 && (stat[i+2] == 'T' || stat[i+2] == 't')
}

// quiesce waits until every restart is done, no replica is serving a
// request, and every envelope the replicas answered has been read.
func (s *replicaSet) quiesce(client *http.Client, mark int) error {
	s.restarts.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range s.names {
		addr := s.addrs[s.index(name)]
		for {
			var busy int
			resp, err := client.Get("http://" + addr + "/control/busy")
			if err == nil {
				fmt.Fscan(resp.Body, &busy)
				resp.Body.Close()
			}
			if err == nil && busy == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s still serves %d requests after 30s (%v)", name, busy, err)
			}
			time.Sleep(20 * time.Millisecond) // the replica's own calls end on their own time
		}
		// Every line printed before the mark has been read once it is.
		p := s.proc(name)
		resp, err := client.Get(fmt.Sprintf("http://%s/control/sync?mark=%d", addr, mark))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		resp.Body.Close()
		for got := -1; got != mark; {
			select {
			case got = <-p.synced:
			case <-p.done:
				return fmt.Errorf("%s ended: %s", name, p.stderr.String())
			case <-time.After(10 * time.Second):
				return errors.New(name + " did not print its sync mark")
			}
		}
	}
	return nil
}

// envelopes returns what the replicas answered so far.
func (s *replicaSet) envelopes() []answered {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]answered(nil), s.answered...)
}

// stderr returns the standard error of every replica process, ended or
// running.
func (s *replicaSet) stderr() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.stderrs)
	for _, p := range s.procs {
		out = append(out, p.stderr.String())
	}
	return out
}

// close kills every replica.
func (s *replicaSet) close() {
	s.restarts.Wait()
	s.mu.Lock()
	procs := make([]*replicaProc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.killed.Store(true)
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.done
	}
}
