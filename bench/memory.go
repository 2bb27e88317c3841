package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// Memory is what /proc/<pid>/status said about the gateway's process while a
// scenario ran.
type Memory struct {
	PID int `json:"pid"`
	// InProcess: the process is the bench itself (gateway, every other role
	// and the load generator together).
	InProcess bool `json:"inProcess,omitempty"`
	// PeakRSSKB is the largest VmRSS sampled every 200 ms during the scenario.
	PeakRSSKB int64 `json:"peakRssKb"`
	// HWMKB is VmHWM at the end: the peak RSS since the process started.
	HWMKB int64  `json:"hwmKb"`
	Error string `json:"error,omitempty"`
}

// PeakMB is the larger of the sampled peak and VmHWM, in MB (10^6 bytes).
func (m *Memory) PeakMB() float64 { return float64(max(m.PeakRSSKB, m.HWMKB)) * 1024 / 1e6 }

// readStatus returns VmRSS and VmHWM of pid in kB.
func readStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	return parseStatus(b)
}

func parseStatus(b []byte) (rss, hwm int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	found := 0
	for sc.Scan() {
		line := sc.Bytes()
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			dst = &rss
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			dst = &hwm
		default:
			continue
		}
		f := bytes.Fields(line[6:])
		if len(f) < 1 {
			return 0, 0, fmt.Errorf("malformed %q", line)
		}
		if *dst, err = strconv.ParseInt(string(f[0]), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("malformed %q", line)
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("VmRSS or VmHWM missing")
	}
	return rss, hwm, nil
}

// memorySampler samples a process's RSS until stopped.
type memorySampler struct {
	stop func() *Memory
}

// startMemory starts sampling t's gateway process; a target without a pid
// gives a sampler whose stop returns nil.
func startMemory(t Target) *memorySampler {
	s := &memorySampler{}
	if t.GatewayPID <= 0 {
		s.stop = func() *Memory { return nil }
		return s
	}
	m := &Memory{PID: t.GatewayPID, InProcess: t.InProcess}
	var mu sync.Mutex
	sample := func() {
		rss, hwm, err := readStatus(m.PID)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			m.Error = err.Error()
			return
		}
		m.PeakRSSKB = max(m.PeakRSSKB, rss)
		m.HWMKB = hwm
	}
	sample()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	s.stop = func() *Memory {
		close(done)
		<-finished
		sample()
		return m
	}
	return s
}
