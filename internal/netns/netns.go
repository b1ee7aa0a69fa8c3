//go:build linux && (amd64 || arm64)

// Package netns builds small, isolated networks of Linux network namespaces
// for tests: a hub namespace holding a bridge, and host namespaces each
// joined to it by a veth pair, with addresses the package assigns and no
// route anywhere else. Nothing is created in the caller's own namespace:
// the veth ends are made directly inside their namespaces, and the caller
// reaches a namespace through Dial and Listen, which open their sockets
// from an OS thread moved into it. It needs root and the ip(8) tool.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Subnet is the /24 every network uses inside its own namespaces: the hub
// is .1, host i (from 0) is .11+i. It is private to the namespaces, so
// networks of concurrent runs do not collide.
const Subnet = "198.18.0"

// Usable reports why namespaces cannot be made here ("" when they can):
// not root, or no ip tool.
func Usable() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "the ip tool is not installed"
	}
	return ""
}

// NS is one network namespace, named as ip-netns(8) names it.
type NS struct {
	Name string
	Addr string // its address on the bridge
	Link string // its end of its veth pair ("" for the hub)
}

// Network is a hub and its hosts.
type Network struct {
	Prefix string // of every namespace name, unique to the run
	Hub    *NS
	Hosts  []*NS
}

// ip runs the ip tool with a bound on its time.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// New makes a hub namespace with a bridge and one namespace per host name,
// each with a veth pair to the bridge and an address on Subnet. The
// namespaces are named base-PID-NANOS-role, so a crashed earlier run's
// cannot collide; namespaces of base whose process is gone are deleted
// first. Close deletes them all (and with them every interface).
func New(base string, hosts ...string) (*Network, error) {
	removeStale(base)
	n := &Network{Prefix: fmt.Sprintf("%s-%d-%d-", base, os.Getpid(), time.Now().UnixNano()%1_000_000_000)}
	n.Hub = &NS{Name: n.Prefix + "hub", Addr: Subnet + ".1"}
	if err := n.add(n.Hub); err != nil {
		return n, err
	}
	if err := ip("-n", n.Hub.Name, "link", "add", "br0", "type", "bridge"); err != nil {
		return n, err
	}
	if err := ip("-n", n.Hub.Name, "addr", "add", n.Hub.Addr+"/24", "dev", "br0"); err != nil {
		return n, err
	}
	if err := ip("-n", n.Hub.Name, "link", "set", "br0", "up"); err != nil {
		return n, err
	}
	for i, h := range hosts {
		ns := &NS{Name: n.Prefix + h, Addr: fmt.Sprintf("%s.%d", Subnet, 11+i), Link: "eth0"}
		n.Hosts = append(n.Hosts, ns)
		if err := n.add(ns); err != nil {
			return n, err
		}
		hubEnd := "p-" + h
		steps := [][]string{
			{"link", "add", ns.Link, "netns", ns.Name, "type", "veth", "peer", "name", hubEnd, "netns", n.Hub.Name},
			{"-n", n.Hub.Name, "link", "set", hubEnd, "master", "br0"},
			{"-n", n.Hub.Name, "link", "set", hubEnd, "up"},
			{"-n", ns.Name, "addr", "add", ns.Addr + "/24", "dev", ns.Link},
			{"-n", ns.Name, "link", "set", ns.Link, "up"},
		}
		for _, s := range steps {
			if err := ip(s...); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// add creates ns with its loopback up.
func (n *Network) add(ns *NS) error {
	if err := ip("netns", "add", ns.Name); err != nil {
		return err
	}
	return ip("-n", ns.Name, "link", "set", "lo", "up")
}

// Close deletes every namespace of the network.
func (n *Network) Close() error {
	var errs []error
	for _, ns := range append([]*NS{n.Hub}, n.Hosts...) {
		if ns != nil && exists(ns.Name) {
			errs = append(errs, ip("netns", "del", ns.Name))
		}
	}
	return errors.Join(errs...)
}

// SetLink brings host ns's veth end up or down: down, the host has no
// network but its loopback.
func (n *Network) SetLink(ns *NS, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip("-n", ns.Name, "link", "set", ns.Link, state)
}

// Cmd is exec.Command of name and args run in ns.
func (ns *NS) Cmd(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Dial connects from inside ns, for an http.Transport's or a Kafka
// client's dialer.
func (ns *NS) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens inside ns.
func (ns *NS) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := ns.do(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// do runs f on an OS thread moved into ns. The thread is never unlocked,
// so the runtime ends it when f's goroutine returns and no other goroutine
// ever runs in ns; the sockets f opens stay in ns.
func (ns *NS) do(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := syscall.Open("/run/netns/"+ns.Name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("open namespace %s: %w", ns.Name, err)
			return
		}
		_, _, errno := syscall.RawSyscall(sysSetns, uintptr(fd), syscall.CLONE_NEWNET, 0)
		syscall.Close(fd)
		if errno != 0 {
			done <- fmt.Errorf("setns %s: %w", ns.Name, errno)
			return
		}
		done <- f()
	}()
	return <-done
}

func exists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}

// removeStale deletes the namespaces named base-PID-... whose process PID
// is gone: what a killed earlier run left. The processes still running in
// one (that run's daemons, orphaned) are killed first, by their ids.
func removeStale(base string) {
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), base+"-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || syscall.Kill(pid, 0) == nil {
			continue
		}
		killIn(e.Name())
		_ = ip("netns", "del", e.Name())
	}
}

// killIn SIGKILLs the processes in namespace name (ip netns pids).
func killIn(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", name).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
