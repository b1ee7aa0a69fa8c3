package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Child is a server run as a child process, so that its CPU is measured
// apart from the load generator's (CPU). Its output (stdout and stderr) is
// scanned for lines that say where it serves, and the last lines are kept
// for errors.
type Child struct {
	Name string
	cmd  *exec.Cmd

	mu     sync.Mutex
	tail   []string
	waited chan struct{}
	err    error // of Wait, once waited is closed
}

// StartChild runs exe with args and env (added to this process's
// environment) and waits up to timeout for a line of its output to match
// ready; it returns the first submatch of each of want (and of ready,
// last) seen by then ("" for those not seen). With ready nil it returns
// once the child has started, and finds nothing. The child gets SIGKILL if
// this process's thread that started it ends (Pdeathsig), and ctx ending
// kills it too; Stop ends it earlier.
func StartChild(ctx context.Context, name, exe string, args, env []string, ready *regexp.Regexp, timeout time.Duration, want ...*regexp.Regexp) (*Child, []string, error) {
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(cmd.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	c := &Child{Name: name, cmd: cmd, waited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("%s: start %s: %w", name, exe, err)
	}
	go func() {
		c.err = cmd.Wait()
		pw.Close()
		close(c.waited)
	}()
	found := make([]string, len(want)+1)
	readyc := make(chan []string, 1)
	if ready == nil {
		go c.scan(pr, nil, nil, readyc)
		return c, found, nil
	}
	go c.scan(pr, append(want, ready), found, readyc)
	select {
	case got := <-readyc:
		return c, got, nil
	case <-c.waited:
		return nil, nil, fmt.Errorf("%s: exited before serving (%v): %s", name, c.err, c.Tail())
	case <-time.After(timeout):
		c.Stop()
		return nil, nil, fmt.Errorf("%s: not serving after %v: %s", name, timeout, c.Tail())
	}
}

// scan reads the child's output to its end, keeping the last lines and
// sending the submatches found on readyc when the last pattern matches.
func (c *Child) scan(r io.Reader, pats []*regexp.Regexp, found []string, readyc chan<- []string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		c.mu.Lock()
		if c.tail = append(c.tail, line); len(c.tail) > 20 {
			c.tail = c.tail[1:]
		}
		c.mu.Unlock()
		if sent || len(pats) == 0 {
			continue
		}
		for i, p := range pats {
			if m := p.FindStringSubmatch(line); m != nil && found[i] == "" {
				found[i] = m[len(m)-1]
			}
		}
		if found[len(found)-1] != "" {
			readyc <- found
			sent = true
		}
	}
	io.Copy(io.Discard, r)
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// CPU is the user plus system CPU the child has used so far (ProcCPU).
func (c *Child) CPU() (time.Duration, error) { return ProcCPU(c.Pid()) }

// Tail is the child's last lines of output, joined.
func (c *Child) Tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "\n")
}

// Exited says whether the child has ended.
func (c *Child) Exited() bool {
	select {
	case <-c.waited:
		return true
	default:
		return false
	}
}

// Stop ends the child: SIGTERM, then SIGKILL after 5 seconds. It returns
// the child's exit error unless the child ended by the signals Stop sent.
func (c *Child) Stop() error {
	if c.Exited() {
		return c.exitErr()
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.waited:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-c.waited
	}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) && !ee.Exited() {
		return nil // ended by a signal: ours
	}
	return c.exitErr()
}

func (c *Child) exitErr() error {
	if c.err != nil {
		return fmt.Errorf("%s: %w: %s", c.Name, c.err, c.Tail())
	}
	return nil
}
