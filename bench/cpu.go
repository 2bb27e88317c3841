package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CPU time per order, by process: a figure that drifts far less with the
// machine's load than orders per second. A step that loses half its rate
// to another tenant's busy loop still costs about the same CPU per order,
// so the CPU each process spends per accepted order tells what the full
// system adds to the intake alone even on a noisy machine (the guide's
// "report what does not drift").
//
// The time is user + system of /proc/<pid>/stat (fields 14 and 15, in
// USER_HZ ticks: 100 per second on Linux, whatever the kernel's HZ) of the
// bench process and of the servers listening on the configured addresses.
// A server on another machine, or one this user may not inspect, is left
// out (no column).

// userHZ is the unit of /proc/<pid>/stat's utime and stime.
const userHZ = 100

// cpuProc is a process whose CPU time is charged to the steps.
type cpuProc struct {
	name string // stampede (the bench process: every role and the load generator), redis, mysql, rabbitmq
	pid  int
}

// cpuMeter reads the CPU time of its processes; nil measures nothing.
type cpuMeter struct {
	procs []cpuProc
}

// cpuServers are the names of Env.Servers a meter looks up, in its columns'
// order.
var cpuServers = []string{"redis", "mysql", "rabbitmq"}

// newCPUMeter finds the bench process and the local process listening on
// each of servers' host:port (servers: name → address, cpuServers in that
// order). A server not found is left out.
func newCPUMeter(servers map[string]string) *cpuMeter {
	m := &cpuMeter{procs: []cpuProc{{name: "stampede", pid: os.Getpid()}}}
	for _, name := range cpuServers {
		addr := servers[name]
		if addr == "" {
			continue
		}
		if pid := listenerPID(addr); pid > 0 {
			m.procs = append(m.procs, cpuProc{name: name, pid: pid})
		}
	}
	return m
}

// names are the processes' names, in the order of sample's values.
func (m *cpuMeter) names() []string {
	out := make([]string, len(m.procs))
	for i, p := range m.procs {
		out[i] = p.name
	}
	return out
}

// sample is each process's CPU time so far, seconds; -1 for one that could
// not be read (it exited).
func (m *cpuMeter) sample() []float64 {
	out := make([]float64, len(m.procs))
	for i, p := range m.procs {
		s, err := processCPU(p.pid)
		if err != nil {
			s = -1
		}
		out[i] = s
	}
	return out
}

// processCPU is pid's user + system CPU time, seconds.
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime + stime (ticks) from a /proc/<pid>/stat line:
// "pid (comm) state …" where comm may hold spaces and parentheses, so the
// fields are counted from the last ')'.
func parseStatCPU(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return float64(ut+st) / userHZ, nil
}

// listenerPID is the pid of the local process with a listening TCP socket
// on addr's port (any local address), 0 if none is found: the socket's
// inode from /proc/net/tcp and tcp6, then the process holding it among
// /proc/*/fd. A host that is not this machine's loopback or one of its
// addresses is not looked up.
func listenerPID(addr string) int {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	if host != "" && host != "localhost" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() && !localIP(ip) {
			return 0
		}
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, ino := range listeningInodes(b, uint16(port)) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, d := range dirs {
		fds, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(d, fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
				return pid
			}
		}
	}
	return 0
}

// listeningInodes are the inodes of the sockets listening (state 0A) on
// port in a /proc/net/tcp or tcp6 table.
func listeningInodes(table []byte, port uint16) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Scan() // header
	want := fmt.Sprintf(":%04X", port)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], want) {
			continue
		}
		out = append(out, f[9])
	}
	return out
}

// localIP says whether ip is one of this machine's addresses.
func localIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// cpuStep is the CPU each process spent over one sustained step (warm-up
// included) and the orders the step accepted.
type cpuStep struct {
	phase    string
	accepted int64
	seconds  []float64 // by process, as cpuMeter.names; -1 unread
}

// perOrderMs is the step's CPU milliseconds per accepted order, by process
// and in total (last); nil when nothing was accepted.
func (c cpuStep) perOrderMs() []float64 {
	if c.accepted <= 0 {
		return nil
	}
	out := make([]float64, len(c.seconds)+1)
	for i, s := range c.seconds {
		out[i] = -1
		if s >= 0 {
			out[i] = s * 1000 / float64(c.accepted)
			out[len(out)-1] += out[i]
		}
	}
	return out
}

// cpuTable is the report's table of the steps' CPU per order.
func cpuTable(names []string, steps []cpuStep) Table {
	tb := Table{
		Title: "CPU per accepted order (or answer) by process (ms; /proc utime + stime over each step, warm-up included; " +
			"stampede is the bench process: every role and the load generator). Drifts far less with the machine's load than orders/s",
		Header: append(append([]string{"step", "accepted"}, names...), "total"),
	}
	for _, st := range steps {
		row := []string{st.phase, strconv.FormatInt(st.accepted, 10)}
		ms := st.perOrderMs()
		for i := range len(names) + 1 {
			switch {
			case ms == nil || ms[i] < 0:
				row = append(row, "–")
			default:
				row = append(row, strconv.FormatFloat(ms[i], 'f', 3, 64))
			}
		}
		tb.Rows = append(tb.Rows, row)
	}
	return tb
}

// cpuDelta is the step named phase between two samples: answers counted
// in place of accepted orders.
func cpuDelta(phase string, answers int64, cpu0, cpu1 []float64) cpuStep {
	st := cpuStep{phase: phase, accepted: answers, seconds: make([]float64, len(cpu1))}
	for i := range cpu1 {
		st.seconds[i] = -1
		if cpu0[i] >= 0 && cpu1[i] >= cpu0[i] {
			st.seconds[i] = cpu1[i] - cpu0[i]
		}
	}
	return st
}

// cpuLog collects the CPU per order of a sustained run's steps, both
// series interleaved as they ran; a nil *cpuLog measures nothing.
type cpuLog struct {
	meter *cpuMeter
	steps []cpuStep
}

// start samples the processes and the orders accepted so far before a step.
func (l *cpuLog) start(acc *outcomes) ([]float64, int64) {
	if l == nil {
		return nil, 0
	}
	a, _ := acc.counts()
	return l.meter.sample(), a
}

// end records the step named phase from start's samples.
func (l *cpuLog) end(phase string, cpu0 []float64, acc0 int64, acc *outcomes) {
	if l == nil || cpu0 == nil {
		return
	}
	a, _ := acc.counts()
	l.steps = append(l.steps, cpuDelta(phase, a-acc0, cpu0, l.meter.sample()))
}

// figures adds the table of every step and, for each series' highest clean
// step, its CPU per order in total and the cores in use at it (CPU per
// order × the step's 202 rate, every process measured): two series that
// stop at the same share of the machine's cores were both stopped by the
// CPU, and the ratio of their rates is then the ratio of their CPU per
// order at those steps.
func (l *cpuLog) figures(s *ScenarioResult, full, alone *stepper) {
	if l == nil || len(l.steps) == 0 {
		return
	}
	s.Tables = append(s.Tables, cpuTable(l.meter.names(), l.steps))
	for _, st := range []*stepper{full, alone} {
		if st == nil || st.best == nil {
			continue
		}
		ms, ok := l.total(st.best.Name)
		if !ok {
			continue
		}
		s.figure(st.label+"CPU per order at the highest clean step (every process measured)", ms*1000, "µs")
		s.figure(st.label+"cores in use at the highest clean step (every process measured)", ms/1000*classRate(st.best.Result, classAccepted), "cores")
	}
}

// total is the CPU ms per order, every process together, of the step named
// phase; false when it was not measured or accepted nothing.
func (l *cpuLog) total(phase string) (float64, bool) {
	for _, st := range l.steps {
		if st.phase == phase {
			if ms := st.perOrderMs(); ms != nil {
				return ms[len(ms)-1], true
			}
		}
	}
	return 0, false
}
