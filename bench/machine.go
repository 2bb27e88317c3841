package bench

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/persistence"
)

// Machine is what the run ran on. Peers publish numbers without it; every
// Stampede report carries it.
type Machine struct {
	CPU       string `json:"cpu"`       // /proc/cpuinfo model name
	Cores     int    `json:"cores"`     // logical CPUs usable by this process
	MemoryMB  int64  `json:"memoryMb"`  // MemTotal
	GoVersion string `json:"goVersion"` //
	OS        string `json:"os"`        // GOOS/GOARCH and kernel release
	LoadAvg   string `json:"loadAvg"`   // /proc/loadavg at the start: 1, 5, 15 minutes
	Redis     string `json:"redis"`     // redis_version
	MySQL     string `json:"mysql"`     // SELECT VERSION(), with the settings of mysqlSettings
}

func machineInfo(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store) Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPU = cpuModel(b)
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemoryMB = memTotalMB(b)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS += " " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if rdb != nil {
		if info, err := rdb.Info(ctx, "server").Result(); err == nil {
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
					m.Redis = v
				}
			}
		}
	}
	if store != nil {
		_ = store.DB.QueryRowContext(ctx, "SELECT VERSION()").Scan(&m.MySQL)
		m.MySQL += mysqlSettings(ctx, store.DB)
	}
	return m
}

// mysqlSettings describes the server settings a drain depends on (docs/mysql.md)
// as " (buffer pool 1024 MB, redo log 1024 MB, flush at commit 1)"; "" when
// they cannot be read. MySQL 8.0.30+ reports its redo capacity.
func mysqlSettings(ctx context.Context, db *sql.DB) string {
	var pool, redo int64
	var flush string
	if err := db.QueryRowContext(ctx, `SELECT @@innodb_buffer_pool_size, @@innodb_log_file_size, @@innodb_flush_log_at_trx_commit`).Scan(&pool, &redo, &flush); err != nil {
		return ""
	}
	var capacity int64
	if db.QueryRowContext(ctx, `SELECT @@innodb_redo_log_capacity`).Scan(&capacity) == nil && capacity > 0 {
		redo = capacity
	}
	return fmt.Sprintf(" (buffer pool %d MB, redo log %d MB, flush at commit %s)", pool>>20, redo>>20, flush)
}

// cpuModel returns the first "model name" of /proc/cpuinfo (or "Hardware" /
// "CPU part" on machines without one), with its count when cores differ.
func cpuModel(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	model := ""
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		if k == "model name" || (model == "" && k == "Hardware") {
			model = strings.TrimSpace(v)
			if k == "model name" {
				break
			}
		}
	}
	if model == "" {
		return "unknown"
	}
	return model
}

func memTotalMB(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb / 1024
			}
		}
	}
	return 0
}
